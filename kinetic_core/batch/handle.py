"""BatchHandle: a durable reference to a batch, its views, waits, results and cancel.

Waiting drives the batch: whoever waits (any process) retries failed children, because
the submitting process may be gone (e.g. an Airflow worker that deferred). The sync and
async drivers share one ``Tracker`` and differ only in how they wait between ticks.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kinetic_core.batch.driver import StepResult, driver_jobs
from kinetic_core.batch.logtail import DEFAULT_LINES_PER_CHILD, BatchLogTail
from kinetic_core.batch.manifest import BatchRecords, child_key, unsubmitted_status
from kinetic_core.batch.tracker import BatchProgress, Tracker, index_of
from kinetic_core.config.target import positive_seconds
from kinetic_core.control.polling import Until, poll_ticks
from kinetic_core.control.resolution import resolve_states
from kinetic_core.errors import BatchError, JobCancelled, JobStillRunning, ResultNotAvailable
from kinetic_core.jobs.failures import exception_text, failure_data
from kinetic_core.jobs.handle import JobHandle
from kinetic_core.records import layout
from kinetic_core.states import ChildStatus, JobState, JobStatus, timestamp
from kinetic_core.util.waits import aticks, in_thread
from kinetic_core.util.words import plural

DEFAULT_POLL_TIMEOUT = 24 * 3600.0  # an attached batch never waits forever by default

Collected = tuple[int, Any, bool]  # (input index, value or exception, succeeded)


REPORTED_CHILDREN = 10  # a BatchError reports this many failed children in full
REPORT_LOG_LINES = 20


def child_report(job: JobHandle, exc: BaseException) -> str:
    """A failed child's remote exception (with its traceback) and the tail of its log."""
    text = exception_text(exc)
    try:
        tail = job.logs(tail=REPORT_LOG_LINES).rstrip()
    except Exception:
        tail = ""
    if tail:
        text += f"\n--- last {REPORT_LOG_LINES} log lines of {job.job_id} ---\n{tail}"
    return text


@dataclass(frozen=True)
class FailedChild:
    """An input that did not succeed: its job and final state, or why it has no job."""

    index: int
    job: JobHandle | None
    state: JobState | None
    error: BaseException | None

    @property
    def status(self) -> ChildStatus:
        if self.state is not None:
            return ChildStatus.of(self.state.status)
        return unsubmitted_status(self.error) if self.error else ChildStatus.SUBMIT_FAILED

    @property
    def reason(self) -> str:
        if self.state is not None:
            return self.state.reason or ""
        return type(self.error).__name__

    @property
    def message(self) -> str:
        return (self.state.message or "") if self.state is not None else str(self.error)


def _interval(tracker: Tracker, poll_interval: float | None) -> float:
    """The wait's interval: the caller's, else the batch's (``Driver.interval``)."""
    if poll_interval is None:
        return tracker.interval
    return positive_seconds(poll_interval, "poll_interval")


SHOWN_UNFINISHED = 5


def _unfinished(tracker: Tracker) -> str:
    """What a WaitTimeout says: the batch's count and the children still running."""
    left = [i for i in range(tracker.records.total) if i not in tracker.final]
    shown = ", ".join(f"child {i} ({tracker.status_of(i).value})" for i in left[:SHOWN_UNFINISHED])
    more = f" and {len(left) - SHOWN_UNFINISHED} more" if len(left) > SHOWN_UNFINISHED else ""
    return f"{tracker.describe()}; still running: {shown}{more}" if left else tracker.describe()


@dataclass
class _Throttle:
    """True at most once per ``every`` seconds, and whenever the batch is done."""

    every: float
    last: float = float("-inf")

    def __call__(self, done: bool) -> bool:
        now = time.monotonic()
        if now - self.last < self.every and not done:
            return False
        self.last = now
        return True


ALREADY_COLLECTED = "already collected"
_WHAT_ORDER = ("failed", "cancelled", "not launched", "not submitted", ALREADY_COLLECTED)


def _what_happened(error: BaseException, unsubmitted: bool) -> str:
    """How an input that gave no value ended, in the words a BatchError counts it by."""
    if unsubmitted:  # no job: the batch stopped before launching it, or submitting failed
        return "not launched" if isinstance(error, JobCancelled) else "not submitted"
    if isinstance(error, ResultNotAvailable):
        return ALREADY_COLLECTED
    return "cancelled" if isinstance(error, JobCancelled) else "failed"


class BatchHandle:
    """A durable reference to a batch. Rebuild it anywhere with ``attach_batch``."""

    def __init__(
        self,
        manifest: dict[str, Any],
        *,
        signing_key: str | None = None,
        poll_timeout: float = DEFAULT_POLL_TIMEOUT,
    ) -> None:
        self.manifest = manifest
        self.group_id: str = manifest["group_id"]
        self.name: str = manifest["name"]
        self.total: int = manifest["total_expected"]
        self.retries: int = manifest["retries"]
        self.signing_key = signing_key
        self.poll_timeout = poll_timeout
        self.records = BatchRecords(manifest, signing_key)
        #: True when ``submit_map`` found this batch under its idempotency key (a retry).
        self.reattached = False
        self._tracker: Tracker | None = None

    @property
    def last_step(self) -> StepResult:
        """What the latest tick of a wait on this handle saw (launched children, states)."""
        return self._tracker.last if self._tracker is not None else StepResult()

    def log_tail(self, lines_per_child: int = DEFAULT_LINES_PER_CHILD) -> BatchLogTail:
        """Children's new log lines, ``[child i]``-prefixed, read after each tick of a
        wait on this handle (``progress``/``aprogress``): at most ``lines_per_child`` per
        child per read."""
        return BatchLogTail(self, lines_per_child)

    # ---- views --------------------------------------------------------------------------
    @property
    def tags(self) -> dict[str, str]:
        """The tags the batch was submitted with (the Target's and ``submit_map``'s); each
        child also carries ``kinetic/group-id`` and ``kinetic/index``."""
        return dict(self.manifest.get("tags") or {})

    @property
    def created_at(self) -> datetime:
        created = timestamp(self.manifest["created_at"])
        assert created is not None
        return created

    @property
    def jobs(self) -> list[JobHandle | None]:
        """Latest attempt of each child; None where not (yet) submitted or submission failed."""
        return self.records.latest_jobs()

    @property
    def submission_complete(self) -> bool:
        return self.records.marker(layout.SUBMISSION_COMPLETE)

    @property
    def cancel_requested(self) -> bool:
        return self.records.marker(layout.CANCEL_REQUESTED)

    @property
    def submission_abandoned(self) -> bool:
        """Always False: once ``submit_map`` returned, no child depends on its process."""
        return False

    @property
    def submission_failures(self) -> dict[int, BaseException]:
        return self.records.submission_failures()

    def _latest(self) -> tuple[list[JobHandle | None], list[JobState | None]]:
        """Latest attempt of each input and its state, from one bulk poll. A failed
        attempt may have been retried since by another process (a keyed resubmission):
        its child record is re-read then, and the newer attempt reported."""
        jobs = self.jobs
        submitted = [i for i, j in enumerate(jobs) if j is not None]
        found = resolve_states([j for j in jobs if j is not None]) if submitted else []
        states: dict[int, JobState] = dict(zip(submitted, found, strict=True))
        moved: list[int] = []
        for i, state in states.items():
            if state.status is JobStatus.FAILED:
                rec = self.records.reload(i)
                if rec is not None and rec.attempts and rec.attempts[-1] != state.job_id:
                    jobs[i] = self.records.handle(rec.attempts[-1])
                    moved.append(i)
        if moved:
            again = resolve_states([j for i in moved if (j := jobs[i]) is not None])
            states.update(zip(moved, again, strict=True))
        return jobs, [states.get(i) for i in range(len(jobs))]

    def statuses(self) -> list[ChildStatus]:
        """One status per input, from one bulk poll."""
        _, states = self._latest()
        failed = self.submission_failures
        return [
            ChildStatus.of(s.status)
            if s is not None
            else unsubmitted_status(failed[i])
            if i in failed
            else ChildStatus.UNSUBMITTED
            for i, s in enumerate(states)
        ]

    def status_counts(self) -> dict[ChildStatus, int]:
        counts: dict[ChildStatus, int] = {}
        for s in self.statuses():
            counts[s] = counts.get(s, 0) + 1
        return counts

    astatuses = in_thread(statuses)

    def failures(self) -> list[JobHandle]:
        """Children whose final state is FAILED or CANCELLED (correct after cleanup too)."""
        return [f.job for f in self.failed_children() if f.job is not None]

    def failed_children(self) -> list[FailedChild]:
        """Every input that did not succeed, in input order: failed or cancelled children
        with their final state, and inputs that were never submitted with the error."""
        jobs, states = self._latest()
        out = [
            FailedChild(i, job, state, None)
            for i, (job, state) in enumerate(zip(jobs, states, strict=True))
            if state is not None and state.status in (JobStatus.FAILED, JobStatus.CANCELLED)
        ]
        out += [FailedChild(i, None, None, e) for i, e in self.submission_failures.items()]
        return sorted(out, key=lambda f: f.index)

    afailed_children = in_thread(failed_children)

    def failure_reports(self, failed: list[FailedChild]) -> dict[int, str]:
        """Per failed child (the first few): remote exception, traceback and log tail,
        as ``BatchError.reports`` carries them, read as data (``failure_data``): showing a
        failure never unpickles what the job wrote."""
        reports = {}
        for child in [f for f in failed if f.job is not None][:REPORTED_CHILDREN]:
            assert child.job is not None
            reports[child.index] = child_report(child.job, failure_data(child.job))
        return reports

    def to_json(self) -> str:
        return json.dumps({"group_id": self.group_id, "storage": self.manifest["storage"]})

    def child_key(self, index: int) -> str:
        return child_key(self.group_id, index)

    # ---- waiting: one tracker, a sync and an async driver --------------------------------
    def _ticks(
        self, timeout: float | None, poll_interval: float | None = None
    ) -> Iterator[tuple[Tracker, list[int], bool]]:
        """Sync driver. Per tick, one driver step (one bulk poll of the unfinished
        children); yields the tracker, the inputs that became final, and whether the
        batch is done (the last tick)."""
        tracker = self._tracker = Tracker(self.records)
        limit = self.poll_timeout if timeout is None else timeout
        for _ in poll_ticks(
            interval=_interval(tracker, poll_interval),
            timeout=limit,
            describe=lambda: _unfinished(tracker),
        ):
            newly, done = tracker.tick()
            yield tracker, newly, done
            if done:
                return

    async def _aticks(
        self, timeout: float | None, poll_interval: float | None = None
    ) -> AsyncIterator[tuple[Tracker, list[int], bool]]:
        """Async driver, same yields: the same step, one round of I/O in a worker thread."""
        tracker = self._tracker = Tracker(self.records)
        limit = self.poll_timeout if timeout is None else timeout
        async for _ in aticks(
            interval=_interval(tracker, poll_interval),
            timeout=limit,
            describe=lambda: _unfinished(tracker),
        ):
            newly, done = await in_thread(tracker.tick)()
            yield tracker, newly, done
            if done:
                return

    def as_completed(
        self, timeout: float | None = None, poll_interval: float | None = None
    ) -> Iterator[JobHandle]:
        """Each child's handle once, as it reaches its final state (after its retries), in
        completion order, while later ones are still submitted (its input index:
        ``handle.tags["kinetic/index"]``). Checks every ``poll_interval`` seconds at most
        (default: the Target's, capped at 5 s); past ``timeout`` WaitTimeout names the
        children still running, which keep running."""
        for tracker, newly, _ in self._ticks(timeout, poll_interval):
            for index in newly:
                yield tracker.final[index][0]

    async def aas_completed(
        self, timeout: float | None = None, poll_interval: float | None = None
    ) -> AsyncIterator[JobHandle]:
        """Async twin of ``as_completed`` (``async for job in batch.aas_completed()``)."""
        async for tracker, newly, _ in self._aticks(timeout, poll_interval):
            for index in newly:
                yield tracker.final[index][0]

    def progress(
        self, timeout: float | None = None, *, every: float = 0.0
    ) -> Iterator[BatchProgress]:
        """Progress snapshots while the batch runs, at most one per ``every`` seconds, and
        always the final one. Costs nothing beyond the polls that drive the batch."""
        due = _Throttle(every)
        for tracker, _, done in self._ticks(timeout):
            if due(done):
                yield tracker.progress()

    async def aprogress(
        self, timeout: float | None = None, *, every: float = 0.0, until: Until | None = None
    ) -> AsyncIterator[BatchProgress]:
        """Async twin of ``progress``; stops early (no final snapshot then) once ``until()``
        is True, which is asked with each snapshot."""
        due = _Throttle(every)
        async for tracker, _, done in self._aticks(timeout):
            if due(done):
                yield tracker.progress()  # no I/O: counts what the tick read
                if until is not None and await until():
                    return

    def wait(self, timeout: float | None = None) -> list[ChildStatus]:
        for _ in self._ticks(timeout):
            pass
        return self.statuses()

    async def await_(self, timeout: float | None = None) -> list[ChildStatus]:
        async for _ in self._aticks(timeout):
            pass
        return await self.astatuses()

    # ---- results ------------------------------------------------------------------------
    def results(
        self,
        *,
        ordered: bool = True,
        return_exceptions: bool = False,
        cleanup: bool = True,
        timeout: float | None = None,
    ) -> list[Any]:
        """Values per input (input order, or completion order with ``ordered=False``).

        Failures raise BatchError carrying the partial results, unless
        ``return_exceptions`` puts each exception in its place.
        """
        collected = [self._collect(h, cleanup) for h in self.as_completed(timeout)]
        return self._assemble(collected, ordered, return_exceptions)

    async def aresults(
        self,
        *,
        ordered: bool = True,
        return_exceptions: bool = False,
        cleanup: bool = True,
        timeout: float | None = None,
    ) -> list[Any]:
        collected = [
            await in_thread(self._collect)(h, cleanup) async for h in self.aas_completed(timeout)
        ]
        return await in_thread(self._assemble)(collected, ordered, return_exceptions)

    def _collect(self, handle: JobHandle, cleanup: bool) -> Collected:
        try:
            return index_of(handle), handle.result(cleanup=cleanup), True
        except Exception as exc:
            return index_of(handle), exc, False

    def _assemble(
        self, collected: list[Collected], ordered: bool, return_exceptions: bool
    ) -> list[Any]:
        sub_failures = self.submission_failures
        by_index = {i: (v, ok) for i, v, ok in collected}
        for i, exc in sub_failures.items():
            by_index.setdefault(i, (exc, False))
        order = sorted(by_index) if ordered else [i for i, _, _ in collected] + sorted(sub_failures)
        if return_exceptions:
            return [by_index[i][0] for i in order]
        what = {
            i: _what_happened(v, i in sub_failures) for i, (v, ok) in by_index.items() if not ok
        }
        if what and all(w == ALREADY_COLLECTED for w in what.values()):
            raise ResultNotAvailable(
                f"Batch {self.group_id}: the results of {len(what)} of {self.total} inputs were "
                "already collected and cleaned up (none failed). A result can be read again "
                "only if it was kept: pass cleanup=False to results() (kinetic batch results "
                "--keep) to keep them in storage."
            )
        failed = [i for i in order if i in what and i not in sub_failures]
        failed = [i for i in failed if what[i] != ALREADY_COLLECTED]
        if what:
            jobs = self.jobs
            raise BatchError(
                self.group_id,
                counts={w: sum(1 for x in what.values() if x == w) for w in _WHAT_ORDER},
                failures=[j for i in failed if (j := jobs[i]) is not None],
                partial_results=[
                    by_index[i][0] if by_index.get(i, (None, False))[1] else None
                    for i in range(self.total)
                ],
                submission_failures=sub_failures,
                total=self.total,
                reports={
                    i: child_report(j, by_index[i][0])
                    for i in failed[:REPORTED_CHILDREN]
                    if (j := jobs[i]) is not None
                },
            )
        return [by_index[i][0] for i in order]

    # ---- stop ---------------------------------------------------------------------------
    def cancel(self) -> None:
        """Durable: records cancel_requested (submitters everywhere stop launching), then
        cancels every child that is still running. Cancelled children are never retried."""
        self.records.set_marker(layout.CANCEL_REQUESTED)
        for job in self.jobs:
            if job is not None:
                job.cancel()

    acancel = in_thread(cancel)

    def cleanup(self, *, backend: bool = True, storage: bool = True, cancel: bool = False) -> None:
        """Clean up every child's latest attempt, and the batch's finished driver jobs. A
        child still running raises JobStillRunning before anything is cleaned up, unless
        ``cancel=True`` (the batch is cancelled first, as ``cancel()`` does)."""
        jobs = [job for job in self.jobs if job is not None]
        running = [s.job_id for s in resolve_states(jobs) if not s.terminal]
        if running and not cancel:
            raise JobStillRunning(
                f"batch {self.group_id} has {plural(len(running), 'job')} still running "
                f"({', '.join(running[:3])}{', ...' if len(running) > 3 else ''}): cleaning "
                "up would cancel them. Pass cancel=True (kinetic batch cleanup --cancel) "
                "to cancel the batch and clean up, or wait for it first."
            )
        if running:
            self.cancel()
        for job in jobs:  # a cancelled child may still be stopping: cancel=True says so
            job.cleanup(backend=backend, storage=storage, cancel=cancel)
        for driver in driver_jobs(self.records):
            if driver.state().terminal:
                driver.cleanup(backend=backend, storage=storage)

    acleanup = in_thread(cleanup)

    def wait_submitted(self, timeout: float | None = None) -> None:
        """Nothing to wait for: ``submit_map`` returns once every child's call is staged
        and the batch is registered (kept for callers of earlier versions)."""
