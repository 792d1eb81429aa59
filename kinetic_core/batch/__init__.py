"""Batches: fan a function out over inputs with a persisted manifest.

``entry`` (submit_map, attach_batch, list_batches) -> ``handle`` (BatchHandle: views,
waits, results, cancel) -> ``tracker`` (what is final, progress) and ``logtail``
(children's log lines) -> ``stager`` (stage calls, start the driver) -> ``driver`` (the
idempotent launch step any process takes; the detached driver job) -> ``records``
(storage: manifest, markers, the launch ledger).
"""

from kinetic_core.batch.entry import (
    aattach_batch,
    asubmit_map,
    attach_batch,
    list_batches,
    submit_map,
)
from kinetic_core.batch.handle import BatchHandle, FailedChild
from kinetic_core.batch.tracker import BatchProgress

__all__ = [
    "BatchHandle",
    "BatchProgress",
    "FailedChild",
    "aattach_batch",
    "asubmit_map",
    "attach_batch",
    "list_batches",
    "submit_map",
]
