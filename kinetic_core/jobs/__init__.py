"""Layer 8: one job as a user holds it: ``JobHandle`` and ``attach`` (``handle``), ``submit``
(``submission``), finding jobs again (``listing``), how a failure reads (``failures``) and a
job's web pages (``links``). Imports control and below.

Stores written before the re-layout name ``kinetic_core.jobs.<name>``: any name of that old
module is answered from ``handle``.
"""

from kinetic_core.util.moved import old_module_names

__getattr__ = old_module_names(__name__, "kinetic_core.jobs.handle")
