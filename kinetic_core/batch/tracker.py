"""The batch logic shared by every observer: what is final, what progress to report.

Every observer's tick is a driver step (``driver.Driver``): watching a batch also
launches and retries its children, so a batch whose detached driver died still runs
while anyone watches. The sync (``as_completed``/``progress``) and async
(``aas_completed``/``aprogress``) twins only differ in how they wait between ticks.
"""

from __future__ import annotations

from dataclasses import dataclass

from kinetic_core.batch.driver import Driver, StepResult
from kinetic_core.batch.manifest import BatchRecords, unsubmitted_status
from kinetic_core.jobs.handle import BATCH_INDEX_TAG, JobHandle
from kinetic_core.states import ChildStatus, JobState


@dataclass(frozen=True)
class BatchProgress:
    """A snapshot of a batch: how many inputs are in each ChildStatus."""

    group_id: str
    total: int
    counts: dict[ChildStatus, int]

    @property
    def finished(self) -> int:
        """Inputs whose status is final (succeeded, failed, cancelled, not submitted)."""
        return sum(n for status, n in self.counts.items() if status.terminal)

    @property
    def done(self) -> bool:
        return self.finished >= self.total

    @property
    def fraction(self) -> float:
        return self.finished / max(self.total, 1)

    def describe(self) -> str:
        parts = ", ".join(f"{s.value.lower()}: {n}" for s, n in sorted(self.counts.items()))
        return f"{self.finished}/{self.total} finished ({parts})"


def index_of(handle: JobHandle) -> int:
    return int(handle.tags[BATCH_INDEX_TAG])


class Tracker:
    """Which children are final, from one driver step per tick."""

    def __init__(self, records: BatchRecords) -> None:
        self.records = records
        self.driver = Driver(records)
        self.final: dict[int, tuple[JobHandle, JobState]] = {}
        self.last = StepResult()
        self.interval = self.driver.interval()

    def tick(self) -> tuple[list[int], bool]:
        """One driver step; returns the inputs that became final and whether all are."""
        self.last = step = self.driver.step()
        newly: list[int] = []
        for i, state in step.states.items():
            if i not in self.final and self.driver.is_final(i, state, step.cancelled):
                self.final[i] = (step.jobs[i], state)
                newly.append(i)
        return newly, step.done

    def status_of(self, index: int) -> ChildStatus:
        step = self.last
        if index in self.final:
            return ChildStatus.of(self.final[index][1].status)
        if index in step.states:
            state = step.states[index]
            return ChildStatus.PENDING if state.terminal else ChildStatus.of(state.status)
        if index in step.failures:
            return unsubmitted_status(step.failures[index])
        return ChildStatus.UNSUBMITTED

    def progress(self) -> BatchProgress:
        """Counts from what this tick already read."""
        counts: dict[ChildStatus, int] = {}
        for i in range(self.records.total):
            status = self.status_of(i)
            counts[status] = counts.get(status, 0) + 1
        return BatchProgress(self.records.group_id, self.records.total, counts)

    def describe(self) -> str:
        return (
            f"batch {self.records.group_id}: {len(self.final)} of {self.records.total} children "
            "finished; the batch keeps running, reattach with attach_batch(group_id)"
        )
