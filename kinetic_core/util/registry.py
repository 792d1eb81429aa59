"""Every backend and storage scheme by name: one line each, loaded only when first used.

Values are ``"module:attr"`` (attr may be dotted); importing this module imports no
backend and no foreign client library. A backend name maps to its kind
(``kinetic_core.backends.BackendKind``: what the core asks of a backend without a
connection, and ``create``); a storage factory takes a normalized URI. A new backend is one
package exposing its kind plus one line here.
"""

from __future__ import annotations

import importlib

from kinetic_core.errors import ConfigError

TYPE_CHECKING = False  # no `typing` at run time: a job's start path (runner.py)
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

BACKENDS: dict[str, str] = {
    "local": "kinetic_core.backends.local:KIND",
    "kubernetes": "kinetic_core.backends.kubernetes:KIND",
    "gke": "kinetic_core.backends.kubernetes:KIND",
    "slurm": "kinetic_core.backends.slurm:KIND",
}
#: The backend of a target that names none.
DEFAULT_BACKEND = "local"
STORAGE: dict[str, str] = {
    "file": "kinetic_core.storage.local:LocalStorage",
    "gs": "kinetic_core.storage.gcs:GCSStorage",
}
# Top-level package of a missing import -> the extra that installs it.
EXTRAS: dict[str, str] = {"google": "gcs", "kubernetes": "kubernetes"}


def backend_kind(name: str | None) -> Any:
    """The ``kinetic_core.backends.BackendKind`` registered for backend ``name`` (None: the
    default); ConfigError when unknown. Typed ``Any``: the protocol's module imports this
    one, so callers annotate (``kind: BackendKind = registry.backend_kind(name)``)."""
    return _load(BACKENDS, name or DEFAULT_BACKEND, "backend")


def storage_factory(scheme: str) -> Any:
    """The factory registered for storage URI scheme ``scheme`` (``file``, ``gs``...)."""
    return _load(STORAGE, scheme, "storage scheme")


def _load(table: dict[str, str], name: str, kind: str) -> Any:
    if name not in table:
        raise ConfigError(f"Unknown {kind} {name!r}; choose one of {', '.join(table)}.")
    module_name, _, attr = table[name].partition(":")
    value: Any = import_module(module_name, f"{name} {kind}")
    for part in attr.split("."):
        value = getattr(value, part)
    return value


def import_module(module_name: str, what: str) -> ModuleType:
    """Import ``module_name`` for ``what`` (``"gke backend"``); a missing foreign library is
    a ConfigError naming the extra that installs it (a backend kind's ``create`` uses this)."""
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        extra = EXTRAS.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        raise ConfigError(
            f"The {what} needs the {extra!r} extra ({exc}): "
            f"pip install 'kinetic-workflows[{extra}]'."
        ) from exc
