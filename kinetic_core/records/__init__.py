"""Layer 3: what a job leaves in storage: paths (``layout``), envelopes (``envelope``,
``chunks``), log chunks, lifecycle records, the job index and the state history. Imports
storage, config, util and below.

Stores written before the re-layout name ``kinetic_core.records.<name>``: any name of that old
module is answered from ``lifecycle``.
"""

from kinetic_core.util.moved import old_module_names

__getattr__ = old_module_names(__name__, "kinetic_core.records.lifecycle")
