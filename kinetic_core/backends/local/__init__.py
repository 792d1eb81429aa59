"""The local backend: detached supervisor processes on this machine (see ``backend.py``);
``KIND`` (``kind.py``) is what the core asks of it without starting anything.

Names load lazily: ``python -m kinetic_core.backends.local.supervisor`` starts every local
job and must not pay for the backend module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kinetic_core.util.lazy import exports

_EXPORTS = {
    "KIND": "kinetic_core.backends.local.kind",
    "LocalBackend": "kinetic_core.backends.local.backend",
    "default_local_dir": "kinetic_core.backends.local.backend",
}
__all__ = ["KIND", "LocalBackend", "default_local_dir"]

__getattr__ = exports(__name__, _EXPORTS)


if TYPE_CHECKING:
    from kinetic_core.backends.local.backend import LocalBackend, default_local_dir
    from kinetic_core.backends.local.kind import KIND
