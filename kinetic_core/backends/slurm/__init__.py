"""The Slurm backend: one Slurm batch job per kinetic job, one runner per node through
``srun`` (see ``backend.py``); ``KIND`` (``kind.py``) is what the core asks of it without
running any Slurm command.

Names load lazily: ``Target.validate`` imports the kind only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kinetic_core.util.lazy import exports

_EXPORTS = {
    "KIND": "kinetic_core.backends.slurm.kind",
    "SlurmBackend": "kinetic_core.backends.slurm.backend",
    "job_name": "kinetic_core.backends.slurm.kind",
}
__all__ = ["KIND", "SlurmBackend", "job_name"]

__getattr__ = exports(__name__, _EXPORTS)


if TYPE_CHECKING:
    from kinetic_core.backends.slurm.backend import SlurmBackend
    from kinetic_core.backends.slurm.kind import KIND, job_name
