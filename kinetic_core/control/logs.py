"""Following a job's log: bounded reads, whole lines, ending once the job is terminal.

One ``LogStream`` serves both twins: iterate it (``handle.follow_logs()``) or async-iterate
it (``handle.afollow_logs()``). Only the waiting between reads differs: the sync driver
asks the job's state itself; the async driver holds one registration with the shared
poller, so a thousand streams in one process still cost one status poll per interval.

A multi-host job has one log per worker. Read without ``worker``, its lines come from
every worker, each led by ``[w{k}] `` (``read_merged``: one bounded read per worker per
call, whole lines only, in order within each worker); with ``worker=k``, worker k's own,
as a single-host job's (no prefix). The merged cursor is JSON, opaque to callers: each
worker's backend cursor (which itself goes on from the pod to storage when the pod is
gone) and the unfinished last line of each, so a resumed reader neither repeats nor loses
a line. A single-host job's log reads exactly as before (no prefix, the backend's cursor).

The end of a stream waits for every log it reads to be complete (the backend's optional
``log_complete``): a multi-host job reads SUCCEEDED once worker 0 recorded its outcome,
while another worker may still run and print, and a pod may be gone before its last chunk
is in storage. The drain goes on through the same polling ticks until each log is
complete or ``DRAIN_BOUND`` passes (then it ends, and logs which log may be incomplete).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any, Protocol

from kinetic_core.backends import shape_of
from kinetic_core.control import recovery
from kinetic_core.control.polling import (
    OnStatusChange,
    StatusChanges,
    Until,
    interval_of,
    poll_ticks,
    shared_poller,
)
from kinetic_core.control.resolution import JobRef, backend_for
from kinetic_core.errors import ConfigError, WaitTimeout
from kinetic_core.states import JobState
from kinetic_core.util.waits import aticks

log = logging.getLogger(__name__)

#: Bounded reads per tick while the job runs (each read is a bounded chunk), and at the end.
READS_PER_TICK = 16
READS_TO_DRAIN = 10_000
#: Once the job is terminal, how long the stream waits for a log that is not complete yet
#: (a worker still running, a last chunk on its way to storage), and the ticks' interval.
DRAIN_BOUND = 30.0
DRAIN_INTERVAL = 0.5


class Followed(JobRef, Protocol):
    """What a LogStream needs of a job (a JobHandle): its backend too (``log_complete``)."""

    def read_logs(
        self, cursor: str | None = None, *, worker: int | None = None
    ) -> tuple[str, str | None]: ...
    def state(self) -> JobState: ...


# ---- the logs of several workers ---------------------------------------------------------
ReadOne = Callable[[str | None, int], tuple[str, str | None]]  # (cursor, worker) -> chunk


def workers_of(target: Mapping[str, Any]) -> int:
    """How many workers (hosts) a job of ``target`` runs, each with its own log: the
    backend's kind says (``num_hosts``, or the hosts of a multi-host TPU slice)."""
    return shape_of(target).hosts


def check_worker(job_id: str, worker: int | None, count: int) -> None:
    """ConfigError unless ``worker`` is None or one of the job's ``count`` workers."""
    if worker is None:
        return
    if isinstance(worker, bool) or not isinstance(worker, int) or not 0 <= worker < count:
        raise ConfigError(
            f"job {job_id} has {count} worker(s) (0..{count - 1}); worker={worker!r} is none of "
            "them. Pass one of those indexes, or no worker for every worker's lines."
        )


def log_workers_option(value: Any) -> int | None:
    """An orchestrator's ``log_workers`` option (``0`` by default: worker 0's log, the
    coordinator's) as the ``worker`` of a log read: ``"all"`` is None (every worker's
    lines, prefixed ``[w{k}] ``), a whole number >= 0 that worker; ConfigError otherwise.
    A single-host job is worker 0 of 1: any of them reads its one log."""
    if value == "all":
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise ConfigError(
        f"log_workers must be 'all' or a worker index (a whole number >= 0), got {value!r}."
    )


def is_merged(cursor: str | None) -> bool:
    """A cursor of ``read_merged`` (JSON), not a backend's own."""
    return bool(cursor) and str(cursor).startswith("{")


def prefix(worker: int) -> str:
    return f"[w{worker}] "


def prefixed(worker: int, text: str) -> str:
    """Every line of ``text`` led by the worker's prefix (a missing last line end kept so)."""
    return "".join(prefix(worker) + line for line in text.splitlines(keepends=True))


def read_merged(read: ReadOne, count: int, cursor: str | None) -> tuple[str, str]:
    """Every worker's new whole lines, prefixed, and the merged cursor after them."""
    state = _state(cursor)
    out: list[str] = []
    for k in range(count):
        key = str(k)
        text, state["w"][key] = read(state["w"].get(key), k)
        if not text:
            continue
        lines = (state["p"].pop(key, "") + text).split("\n")
        rest = lines.pop()
        if rest:  # unfinished: kept in the cursor until its line end comes
            state["p"][key] = rest
        out.extend(f"{prefix(k)}{line}\n" for line in lines)
    return "".join(out), json.dumps(state, separators=(",", ":"))


def merged_rest(cursor: str | None) -> tuple[list[str], str | None]:
    """The unfinished last lines a merged cursor holds (the job ended: they are whole now),
    prefixed, and the cursor without them."""
    if not is_merged(cursor):
        return [], cursor
    state = _state(cursor)
    rest = [f"{prefix(int(k))}{text}" for k, text in sorted(state["p"].items(), key=_by_worker)]
    state["p"] = {}
    return [line.rstrip("\r") for line in rest], json.dumps(state, separators=(",", ":"))


def _by_worker(item: tuple[str, str]) -> int:
    return int(item[0])


def _state(cursor: str | None) -> dict[str, dict[str, Any]]:
    if not is_merged(cursor):
        return {"w": {}, "p": {}}
    try:
        state = json.loads(str(cursor))
        return {"w": dict(state["w"]), "p": dict(state.get("p") or {})}
    except (ValueError, KeyError, TypeError):
        raise ConfigError(
            f"{cursor!r} is not a log cursor of this job; pass the cursor a read returned, or none."
        ) from None


class LogStream:
    """The log lines of one job as they are written, without their line ends.

    Ends when the job is terminal and its log is drained, when ``timeout`` passes
    (WaitTimeout; the job keeps running), or, async only, when ``until()`` returns True
    (``stopped`` is then True). Afterwards ``state`` is the job's final state (None if the
    stream stopped early) and ``cursor`` is where reading stopped: a later stream started
    there continues without repeating a line. ``worker`` (multi-host jobs): only that
    worker's lines, unprefixed; without it every worker's, prefixed ``[w{k}] ``.

    With ``best_effort`` (what orchestrators want: a log must never fail a task), a failed
    read stops the reading, is kept in ``error``, and the stream still ends with the job.
    ``on_status_change`` gets each transition of the states the stream reads anyway
    (``polling.StatusChanges``): ``result(stream_logs=True)`` needs no wait of its own.
    """

    def __init__(
        self,
        handle: Followed,
        *,
        cursor: str | None = None,
        interval: float | None = None,
        timeout: float | None = None,
        until: Until | None = None,
        best_effort: bool = False,
        worker: int | None = None,
        on_status_change: OnStatusChange | None = None,
    ) -> None:
        self.changes = StatusChanges.of(on_status_change)
        self.on_status_change = on_status_change
        self.waited = handle.job_id  # the job's transitions, whichever attempt is read
        self.handle = handle
        self.worker = worker
        self.best_effort = best_effort
        self.error: Exception | None = None
        self.cursor = cursor
        self.interval = float(interval or interval_of(handle))
        self.timeout = timeout
        self.until = until
        self.state: JobState | None = None
        self.stopped = False
        self._partial = ""
        self._complete: set[tuple[str, int | None]] = set()  # (attempt, worker) logs complete

    # ---- the shared part: reading and line buffering -------------------------------------
    def _read(self, max_reads: int) -> list[str]:
        """Complete lines from up to ``max_reads`` bounded reads (until one brings nothing)."""
        lines: list[str] = []
        for _ in range(0 if self.error else max_reads):
            try:
                chunk, self.cursor = self.handle.read_logs(self.cursor, worker=self.worker)
            except Exception as exc:
                if not self.best_effort:
                    raise
                self.error = exc
                break
            if not chunk:
                if self._follow_recovery():
                    continue
                break
            split = (self._partial + chunk).split("\n")
            self._partial = split.pop()
            lines.extend(line.rstrip("\r") for line in split)
        return lines

    def _follow_recovery(self) -> bool:
        """The job was recovered and this attempt's log is read to its end: go on with
        the newest attempt's log (known to this process; no storage read)."""
        newest = recovery.current(self.handle)
        if newest.job_id == self.handle.job_id:
            return False
        self.handle, self.cursor = newest, None
        return True

    def _rest(self) -> list[str]:
        """The log is read to its end: the unterminated last lines, whole now."""
        lines = [self._partial.rstrip("\r")] if self._partial else []
        self._partial = ""
        rest, self.cursor = merged_rest(self.cursor)
        return lines + rest

    def _finish(self, state: JobState) -> list[str]:
        """The job is terminal: the rest of the log as it is now (one drain, no waiting)."""
        self.state = state
        return self._read(READS_TO_DRAIN) + self._rest()

    # ---- the end: waiting for every log to be complete -----------------------------------
    def _logs(self) -> list[int | None]:
        """The logs this stream reads: its worker's, every worker's of a multi-host job, or
        a single-host job's one log (None)."""
        if self.worker is not None:
            return [self.worker]
        count = workers_of(self.handle.target)
        return list(range(count)) if count > 1 else [None]

    def _incomplete(self) -> list[int | None]:
        """The logs not known complete (a backend without ``log_complete``: none). Asked
        before the reads of a drain step, so those reads get all a complete log holds."""
        job_id = self.handle.job_id
        try:
            complete = getattr(backend_for(self.handle), "log_complete", None)
            for k in self._pending():
                if complete is None or complete(job_id, k):
                    self._complete.add((job_id, k))
        except Exception as exc:
            if not self.best_effort:
                raise
            self.error = exc
            return []
        return self._pending()

    def _pending(self) -> list[int | None]:
        """The logs not known complete so far (no backend asked)."""
        return [k for k in self._logs() if (self.handle.job_id, k) not in self._complete]

    def _drain_step(self) -> tuple[list[str], bool]:
        """One tick of the end: which logs are complete, then every log read until a read
        brings nothing; True once all were complete (or reading failed)."""
        incomplete = self._incomplete()
        lines = self._read(READS_TO_DRAIN)
        return lines, not incomplete or self.error is not None

    def _drain_describe(self) -> str:
        return f"job {self.handle.job_id} ended but its log is not complete"

    def _gave_up(self) -> None:
        """``DRAIN_BOUND`` passed: the stream ends without what an incomplete log lacks."""
        named = ", ".join("its" if k is None else f"worker {k}'s" for k in self._pending())
        log.warning(
            "kinetic: job %s ended %gs ago and %s log is still not complete; the stream "
            "ends, its lines may be incomplete (read them again with `kinetic jobs logs %s`)",
            self.handle.job_id,
            DRAIN_BOUND,
            named or "a",
            self.handle.job_id,
        )

    def lines(self) -> list[str]:
        """New complete lines now (bounded reads), for a caller that drives its own ticks
        (a batch's log tail follows its children from the batch's ticks)."""
        return self._read(READS_PER_TICK)

    def finish(self, state: JobState) -> list[str]:
        """The job is terminal: the rest of its log."""
        return self._finish(state)

    def _describe(self) -> str:
        return f"job {self.handle.job_id} is still running; its log can be followed again"

    # ---- sync driver ---------------------------------------------------------------------
    def __iter__(self) -> Iterator[str]:
        for _ in poll_ticks(
            interval=min(self.interval, 1.0), timeout=self.timeout, describe=self._describe
        ):
            yield from self._read(READS_PER_TICK)
            state = self.handle.state()
            if self.changes is not None:
                self.changes.notify(self.waited, state)
            if state.terminal:
                self.state = state
                yield from self._drain()
                return

    def _drain(self) -> Iterator[str]:
        """The rest of the log, once every log is complete (``_drain_step``'s ticks)."""
        try:
            for _ in poll_ticks(
                interval=DRAIN_INTERVAL, timeout=DRAIN_BOUND, describe=self._drain_describe
            ):
                lines, done = self._drain_step()
                yield from lines
                if done:
                    break
        except WaitTimeout:
            self._gave_up()
        yield from self._rest()

    # ---- async driver --------------------------------------------------------------------
    async def __aiter__(self) -> AsyncIterator[str]:
        done = asyncio.ensure_future(
            shared_poller().wait(self.handle, on_status_change=self.on_status_change)
        )
        try:
            async for _ in aticks(
                interval=self.interval,
                timeout=self.timeout,
                describe=self._describe,
                first=min(self.interval, 1.0),
                wake=done,
            ):
                for line in await asyncio.to_thread(self._read, READS_PER_TICK):
                    yield line
                if done.done():
                    self.state = done.result()
                    async for line in self._adrain():
                        yield line
                    return
                if self.until is not None and await self.until():
                    self.stopped = True
                    return
        finally:
            if not done.done():
                done.cancel()

    async def _adrain(self) -> AsyncIterator[str]:
        """Async twin of ``_drain``: the same steps, run in a worker thread."""
        try:
            async for _ in aticks(
                interval=DRAIN_INTERVAL, timeout=DRAIN_BOUND, describe=self._drain_describe
            ):
                lines, done = await asyncio.to_thread(self._drain_step)
                for line in lines:
                    yield line
                if done:
                    break
        except WaitTimeout:
            self._gave_up()
        for line in self._rest():
            yield line
