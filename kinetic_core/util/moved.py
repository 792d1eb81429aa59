"""Old module paths, kept as aliases of their new homes.

Stores written before the re-layout by layer name modules that moved: pickles reference
classes and functions by module (``kinetic_core.payload``, ``kinetic_core.batch.records``),
and pods started by older code run ``python -m kinetic_core.runner`` or ``-m
kinetic_core.bootstrap``. The facade installs one import finder that answers exactly these
names with the module now holding the code (the same module object: ``kinetic_core.runner is
kinetic_core.runtime.runner``); ``python -m`` of an old name runs the new module's code.
Names of old modules that are packages now (``config``, ``data``, ``jobs``, ``records``)
are answered by that package's ``__getattr__``.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys

TYPE_CHECKING = False  # not `from typing import ...`: the facade imports this in every job
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import CodeType, ModuleType
    from typing import Any

#: old module -> its new home (never shrink: a store may name any of these for years)
MOVED: dict[str, str] = {
    "kinetic_core.bootstrap": "kinetic_core.runtime.bootstrap",
    "kinetic_core.chunks": "kinetic_core.records.chunks",
    "kinetic_core.debugging": "kinetic_core.runtime.debugging",
    "kinetic_core.decorator": "kinetic_core.ops.decorator",
    "kinetic_core.envvars": "kinetic_core.util.envvars",
    "kinetic_core.failures": "kinetic_core.jobs.failures",
    "kinetic_core.gc": "kinetic_core.ops.gc",
    "kinetic_core.history": "kinetic_core.records.history",
    "kinetic_core.hooks": "kinetic_core.config.hooks",
    "kinetic_core.ids": "kinetic_core.util.ids",
    "kinetic_core.job_index": "kinetic_core.records.job_index",
    "kinetic_core.launching": "kinetic_core.control.launching",
    "kinetic_core.links": "kinetic_core.jobs.links",
    "kinetic_core.listing": "kinetic_core.jobs.listing",
    "kinetic_core.log_capture": "kinetic_core.runtime.log_capture",
    "kinetic_core.log_chunks": "kinetic_core.records.log_chunks",
    "kinetic_core.logs": "kinetic_core.control.logs",
    "kinetic_core.notice": "kinetic_core.runtime.notice",
    "kinetic_core.options": "kinetic_core.config.options",
    "kinetic_core.outputs": "kinetic_core.data.outputs",
    "kinetic_core.parallel": "kinetic_core.util.parallel",
    "kinetic_core.payload": "kinetic_core.records.envelope",
    "kinetic_core.polling": "kinetic_core.control.polling",
    "kinetic_core.ports": "kinetic_core.util.ports",
    "kinetic_core.procs": "kinetic_core.util.procs",
    "kinetic_core.recovery": "kinetic_core.control.recovery",
    "kinetic_core.registry": "kinetic_core.util.registry",
    "kinetic_core.retrying": "kinetic_core.util.retrying",
    "kinetic_core.runner": "kinetic_core.runtime.runner",
    "kinetic_core.sidecar": "kinetic_core.runtime.sidecar",
    "kinetic_core.signals": "kinetic_core.runtime.signals",
    "kinetic_core.signing": "kinetic_core.util.signing",
    "kinetic_core.status": "kinetic_core.control.resolution",
    "kinetic_core.submission": "kinetic_core.jobs.submission",
    "kinetic_core.telemetry": "kinetic_core.runtime.telemetry",
    "kinetic_core.termination": "kinetic_core.ops.termination",
    "kinetic_core.usage": "kinetic_core.control.usage",
    "kinetic_core.versions": "kinetic_core.runtime.versions",
    "kinetic_core.workers": "kinetic_core.util.workers",
    "kinetic_core.batch.records": "kinetic_core.batch.manifest",
    "kinetic_core.backends.kubernetes.credentials": "kinetic_core.config.kubeconfig",
}


class _Alias:
    """Finds an old name and loads it as its new module (a meta path finder and its loader)."""

    def __init__(self) -> None:
        self._real_specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        real = _find_spec(new)
        # origin: ``python -m OLD`` sets __file__ from it (the code's real file)
        origin = real.origin if real else None
        return importlib.machinery.ModuleSpec(fullname, self, origin=origin)  # type: ignore[arg-type]

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(MOVED[spec.name])
        self._real_specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # the import system stamped the old name's spec on the module: put its own back
        # (sys.modules[old] is this same module object)
        old = module.__spec__.name if module.__spec__ else ""
        module.__spec__ = self._real_specs.pop(old, module.__spec__)

    def get_code(self, fullname: str) -> CodeType | None:
        """``python -m OLD`` (runpy) runs the new module's code as ``__main__``."""
        new = MOVED[fullname]
        spec = _find_spec(new)
        loader = spec.loader if spec else None
        get_code = getattr(loader, "get_code", None)
        return get_code(new) if get_code else None

    def is_package(self, fullname: str) -> bool:
        return False


def _find_spec(name: str) -> importlib.machinery.ModuleSpec | None:
    import importlib.util  # only when an old name is asked for: every job imports this module

    return importlib.util.find_spec(name)


def install() -> None:
    """Answer the old names (idempotent: one finder per interpreter)."""
    if not any(isinstance(f, _Alias) for f in sys.meta_path):
        sys.meta_path.append(_Alias())


def old_module_names(package: str, module: str) -> Callable[[str], Any]:
    """A package's ``__getattr__`` answering the names of the old module that the package
    replaced (``kinetic_core.data.Data`` -> ``kinetic_core.data.inputs.Data``). A name of one
    of the package's own modules is left to the import system."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__") or _find_spec(f"{package}.{name}") is not None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
