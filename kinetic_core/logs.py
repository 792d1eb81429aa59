"""Following a job's log: bounded reads, whole lines, ending once the job is terminal.

One ``LogStream`` serves both twins: iterate it (``handle.follow_logs()``) or async-iterate
it (``handle.afollow_logs()``). Only the waiting between reads differs: the sync driver
asks the job's state itself; the async driver holds one registration with the shared
poller, so a thousand streams in one process still cost one status poll per interval.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any, Protocol

from kinetic_core import recovery
from kinetic_core.polling import Until, apoll_ticks, interval_of, poll_ticks, shared_poller
from kinetic_core.states import JobState

#: Bounded reads per tick while the job runs (each read is a bounded chunk), and at the end.
READS_PER_TICK = 16
READS_TO_DRAIN = 10_000


class Followed(Protocol):
    """What a LogStream needs of a job (a JobHandle)."""

    @property
    def job_id(self) -> str: ...
    @property
    def target(self) -> dict[str, Any]: ...
    def read_logs(self, cursor: str | None = None) -> tuple[str, str | None]: ...
    def state(self) -> JobState: ...


class LogStream:
    """The log lines of one job as they are written, without their line ends.

    Ends when the job is terminal and its log is drained, when ``timeout`` passes
    (WaitTimeout; the job keeps running), or, async only, when ``until()`` returns True
    (``stopped`` is then True). Afterwards ``state`` is the job's final state (None if the
    stream stopped early) and ``cursor`` is where reading stopped: a later stream started
    there continues without repeating a line.

    With ``best_effort`` (what orchestrators want: a log must never fail a task), a failed
    read stops the reading, is kept in ``error``, and the stream still ends with the job.
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
    ) -> None:
        self.handle = handle
        self.best_effort = best_effort
        self.error: Exception | None = None
        self.cursor = cursor
        self.interval = float(interval or interval_of(handle))
        self.timeout = timeout
        self.until = until
        self.state: JobState | None = None
        self.stopped = False
        self._partial = ""

    # ---- the shared part: reading and line buffering -------------------------------------
    def _read(self, max_reads: int) -> list[str]:
        """Complete lines from up to ``max_reads`` bounded reads (until one brings nothing)."""
        lines: list[str] = []
        for _ in range(0 if self.error else max_reads):
            try:
                chunk, self.cursor = self.handle.read_logs(self.cursor)
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

    def _finish(self, state: JobState) -> list[str]:
        """The job is terminal: the rest of the log, including an unterminated last line."""
        self.state = state
        lines = self._read(READS_TO_DRAIN)
        if self._partial:
            lines.append(self._partial.rstrip("\r"))
            self._partial = ""
        return lines

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
            if state.terminal:
                yield from self._finish(state)
                return

    # ---- async driver --------------------------------------------------------------------
    async def __aiter__(self) -> AsyncIterator[str]:
        done = asyncio.ensure_future(shared_poller().wait(self.handle))
        try:
            async for _ in apoll_ticks(
                interval=self.interval,
                timeout=self.timeout,
                describe=self._describe,
                first=min(self.interval, 1.0),
                wake=done,
            ):
                for line in await asyncio.to_thread(self._read, READS_PER_TICK):
                    yield line
                if done.done():
                    for line in await asyncio.to_thread(self._finish, done.result()):
                        yield line
                    return
                if self.until is not None and await self.until():
                    self.stopped = True
                    return
        finally:
            if not done.done():
                done.cancel()
