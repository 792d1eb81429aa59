"""kinetic_prefect: run Prefect 3 task bodies as detached, reattachable Kinetic jobs.

- ``@kinetic_task``: a real Prefect task whose body runs remotely; retries reattach.
- ``kinetic_map``: fan a function out as one Kinetic batch with a progress artifact.
- ``KineticConfig``: a block with the target (backend, storage, image, signing key...).

Registered through the ``prefect.collections`` entry point, so
``prefect block register -m kinetic_prefect`` registers the block type.
"""

from __future__ import annotations

from kinetic_prefect.batch import kinetic_map
from kinetic_prefect.blocks import KineticConfig
from kinetic_prefect.tasks import KineticTask, kinetic_task

__all__ = ["KineticConfig", "KineticTask", "kinetic_map", "kinetic_task"]
