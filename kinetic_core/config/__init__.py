"""Layer 2: how a job is described: the ``Target`` (``target``), its options for forms
(``options``) and user hooks (``hooks``). Imports util and below.

Stores written before the re-layout name ``kinetic_core.config.Target``: that name (any of the
old module's) is answered from ``target``.
"""

from kinetic_core.util.moved import old_module_names

__getattr__ = old_module_names(__name__, "kinetic_core.config.target")
