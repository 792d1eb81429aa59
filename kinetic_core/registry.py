"""Every backend and storage scheme by name: one line each, loaded only when first used.

Values are ``"module:attr"`` (attr may be dotted); importing this module imports no
backend and no foreign client library. A backend factory takes a resolved ``Target``, a
storage factory a normalized URI. A new backend is one package plus one line here.
"""

from __future__ import annotations

import importlib
from typing import Any

from kinetic_core.errors import ConfigError

BACKENDS: dict[str, str] = {
    "local": "kinetic_core.backends.local.backend:LocalBackend.from_target",
    "kubernetes": "kinetic_core.backends.kubernetes.backend:KubernetesBackend.from_target",
    "gke": "kinetic_core.backends.kubernetes.backend:KubernetesBackend.from_target",
}
STORAGE: dict[str, str] = {
    "file": "kinetic_core.storage.local:LocalStorage",
    "gs": "kinetic_core.storage.gcs:GCSStorage",
}
# Top-level package of a missing import -> the extra that installs it.
EXTRAS: dict[str, str] = {"google": "gcs", "kubernetes": "kubernetes"}


def backend_factory(name: str) -> Any:
    """The factory registered for backend ``name``; ConfigError when unknown or not installed."""
    return _load(BACKENDS, name, "backend")


def storage_factory(scheme: str) -> Any:
    """The factory registered for storage URI scheme ``scheme`` (``file``, ``gs``...)."""
    return _load(STORAGE, scheme, "storage scheme")


def _load(table: dict[str, str], name: str, kind: str) -> Any:
    if name not in table:
        raise ConfigError(f"Unknown {kind} {name!r}; choose one of {', '.join(table)}.")
    module_name, _, attr = table[name].partition(":")
    try:
        value: Any = importlib.import_module(module_name)
    except ImportError as exc:
        extra = EXTRAS.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        raise ConfigError(
            f"The {name} {kind} needs the {extra!r} extra ({exc}): "
            f"pip install 'kinetic-workflows[{extra}]'."
        ) from exc
    for part in attr.split("."):
        value = getattr(value, part)
    return value
