"""The Slurm backend: one Slurm batch job per kinetic job, one runner per node through
``srun`` (see ``backend.py``); ``KIND`` (``kind.py``) is what the core asks of it without
running any Slurm command.

Names load lazily: ``Target.validate`` imports the kind only.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_EXPORTS = {
    "KIND": "kinetic_core.backends.slurm.kind",
    "SlurmBackend": "kinetic_core.backends.slurm.backend",
    "job_name": "kinetic_core.backends.slurm.kind",
}
__all__ = ["KIND", "SlurmBackend", "job_name"]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


if TYPE_CHECKING:
    from kinetic_core.backends.slurm.backend import SlurmBackend
    from kinetic_core.backends.slurm.kind import KIND, job_name
