"""The batch logic shared by every driver: what is pending, what is final, what to retry.

The sync (``as_completed``/``progress``) and async (``aas_completed``/``aprogress``)
drivers only differ in how they wait between ticks; they feed observed states here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kinetic_core import layout
from kinetic_core.batch.records import BatchRecords, unsubmitted_status
from kinetic_core.jobs import JobHandle
from kinetic_core.polling import DEFAULT_INTERVAL
from kinetic_core.states import ChildStatus, JobState, JobStatus


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
    return int(handle.tags["kinetic/index"])


class Tracker:
    """Which children are pending or final, and when a failed child gets another attempt."""

    def __init__(self, records: BatchRecords, retries: int) -> None:
        self.records = records
        self.retries = retries
        self.final: dict[int, tuple[JobHandle, JobState]] = {}
        self.latest: dict[int, JobState] = {}  # last observed state of pending children
        # What this tick's pending() and done() read, so progress() reads nothing again.
        self._jobs: list[JobHandle | None] | None = None
        self._failures: dict[int, BaseException] | None = None
        target = records.manifest["target"]
        self.interval = min(float(target.get("poll_interval") or DEFAULT_INTERVAL), 5.0)

    def pending(self) -> list[JobHandle]:
        self._jobs = jobs = self.records.latest_jobs()
        return [j for i, j in enumerate(jobs) if j is not None and i not in self.final]

    def settle(self, observed: Iterable[tuple[JobHandle, JobState]]) -> list[int]:
        """Record observed states; retry failed children with attempts left. Returns the
        indexes that became final."""
        newly: list[int] = []
        cancelled = self.records.marker(layout.CANCEL_REQUESTED)
        for handle, state in observed:
            index = index_of(handle)
            if not state.terminal:
                self.latest[index] = state
                continue
            rec = self.records.children.get(index)
            if state.status is JobStatus.FAILED and not cancelled:
                rec = self.records.reload(index)
                if rec is not None and rec.attempts and rec.attempts[-1] != handle.job_id:
                    continue  # another process already retried it: follow that attempt
            attempts = len(rec.attempts) if rec else 1
            if state.status is JobStatus.FAILED and attempts <= self.retries and not cancelled:
                self.records.retry(index, handle)
                self.latest.pop(index, None)
                continue
            self.final[index] = (handle, state)
            self.latest.pop(index, None)
            newly.append(index)
        return newly

    def done(self) -> bool:
        self._failures = failures = self.records.submission_failures()
        return len(self.final) + len(failures) >= self.records.total

    def progress(self) -> BatchProgress:
        """Counts from what this tick already read (pending() and done())."""
        jobs = self._jobs if self._jobs is not None else self.records.latest_jobs()
        failures = self._failures
        if failures is None:
            failures = self.records.submission_failures()
        counts: dict[ChildStatus, int] = {}
        for i, job in enumerate(jobs):
            if i in self.final:
                status = ChildStatus.of(self.final[i][1].status)
            elif job is not None:
                seen = self.latest.get(i)
                status = ChildStatus.of(seen.status) if seen else ChildStatus.PENDING
            elif i in failures:
                status = unsubmitted_status(failures[i])
            else:
                status = ChildStatus.UNSUBMITTED
            counts[status] = counts.get(status, 0) + 1
        return BatchProgress(self.records.group_id, self.records.total, counts)

    def describe(self) -> str:
        return (
            f"batch {self.records.group_id}: {len(self.final)} of {self.records.total} children "
            "finished; the batch keeps running, reattach with attach_batch(group_id)"
        )
