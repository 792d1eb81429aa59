"""Layer 4: files into and out of a job: ``inputs`` (``Data``, uploaded once, arriving as a
path) and ``outputs`` (the job's output folder, synced to storage). Imports records and below.

Pickles written before the re-layout name ``kinetic_core.data.Data``: any name of that old
module is answered from ``inputs``.
"""

from kinetic_core.util.moved import old_module_names

__getattr__ = old_module_names(__name__, "kinetic_core.data.inputs")
