"""Waiting, in exactly two places: the sync loop (``poll_ticks``) and the async shared poller.

Both are adaptive: the first polls come fast (5 ms, growing 1.3x) so short jobs finish
with low latency, then settle at the configured interval so long jobs cost little.
The shared poller lives once per event loop; every waiter registers its handle and one
``resolve_states`` call per tick covers them all (one bulk backend poll per scope), run
in a worker thread so the event loop never blocks on a backend or storage call.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kinetic_core.errors import WaitTimeout
from kinetic_core.status import JobState, backend_for, resolve_states

FIRST_DELAY = 0.005
GROWTH = 1.3
DEFAULT_INTERVAL = 5.0


def interval_of(ref: Any) -> float:
    return float(ref.target.get("poll_interval") or DEFAULT_INTERVAL)


def delays(interval: float, first: float = FIRST_DELAY) -> Iterator[float]:
    delay = min(first, interval)
    while True:
        yield delay
        delay = min(delay * GROWTH, interval)


def poll_ticks(
    *,
    interval: float,
    timeout: float | None,
    describe: Callable[[], str],
    watching: Callable[[], list[Any]] | None = None,
) -> Iterator[None]:
    """THE sync wait loop. Yields; the caller checks and ``break``s when done.

    Between ticks it sleeps adaptively; past ``timeout`` it raises WaitTimeout using
    ``describe()`` to say what was still unfinished. With ``watching`` (the handles still
    awaited), a backend that can tell when one of its jobs ends cuts the sleep short.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    for delay in delays(interval):
        yield
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeout(f"Timed out after {timeout:g}s: {describe()}")
            delay = min(delay, remaining)
        _sleep(delay, watching() if watching is not None else [])


def _sleep(delay: float, refs: list[Any]) -> None:
    """Sleep ``delay``, or less if the (single) backend of ``refs`` sees a job end first."""
    if refs:
        backends = {b.scope: b for b in map(backend_for, refs)}
        if len(backends) == 1:
            backend = next(iter(backends.values()))
            sleep_until_change = getattr(backend, "sleep_until_change", None)
            if sleep_until_change is not None:
                sleep_until_change([r.job_id for r in refs], delay)
                return
    time.sleep(delay)


def timeout_message(states: list[JobState]) -> str:
    running = [s for s in states if not s.terminal]
    ids = ", ".join(f"{s.job_id} ({s.status.value})" for s in running[:5])
    more = f" and {len(running) - 5} more" if len(running) > 5 else ""
    return (
        f"still waiting for {ids}{more}. The job keeps running and its handle stays valid: "
        "wait again, or reattach later with kinetic_core.attach(job_id)."
    )


def wait_states(refs: list[Any], *, timeout: float | None = None) -> list[JobState]:
    """Block until every job is terminal; return their states in order."""
    latest: list[JobState] = []
    interval = min((interval_of(r) for r in refs), default=DEFAULT_INTERVAL)

    def describe() -> str:
        return timeout_message(latest)

    def watching() -> list[Any]:
        return [refs[i] for i, s in enumerate(latest) if not s.terminal] if latest else []

    for _ in poll_ticks(interval=interval, timeout=timeout, describe=describe, watching=watching):
        if not latest:
            latest.extend(resolve_states(refs))
        else:
            pending = [i for i, s in enumerate(latest) if not s.terminal]
            for i, state in zip(pending, resolve_states([refs[i] for i in pending]), strict=True):
                latest[i] = state
        if all(s.terminal for s in latest):
            break
    return latest


# ---- async shared poller ---------------------------------------------------------------


@dataclass(eq=False)
class _Waiter:
    ref: Any
    future: asyncio.Future[JobState]


@dataclass
class _Schedule:
    """When a job is next due. Kept per job, so a waiter that re-registers (e.g. a trigger
    streaming logs between waits) continues the backoff instead of restarting it."""

    delays: Iterator[float]
    due: float
    last_waited: float


@dataclass
class SharedPoller:
    """One per event loop: all async waiters share one bulk status call per tick."""

    waiters: list[_Waiter] = field(default_factory=list)
    schedules: dict[str, _Schedule] = field(default_factory=dict)
    polls: int = 0  # resolve_states calls made: what the benchmarks and tests count
    _task: asyncio.Task[None] | None = None
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait(self, ref: Any, timeout: float | None = None) -> JobState:
        """Until the job is terminal. WaitTimeout after ``timeout``; the job keeps running."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        schedule = self.schedules.get(ref.job_id)
        if schedule is None:
            steps = delays(interval_of(ref))
            # First poll one short delay out, so a burst of new waiters shares it.
            schedule = _Schedule(steps, now + next(steps), now)
            self.schedules[ref.job_id] = schedule
        schedule.last_waited = now
        waiter = _Waiter(ref, loop.create_future())
        self.waiters.append(waiter)
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run(), name="kinetic-shared-poller")
        try:
            return await asyncio.wait_for(asyncio.shield(waiter.future), timeout)
        except TimeoutError:
            raise WaitTimeout(
                f"Timed out after {timeout:g}s waiting for job {ref.job_id}; it keeps running."
            ) from None
        finally:
            if waiter in self.waiters:
                self.waiters.remove(waiter)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self.waiters = [w for w in self.waiters if not w.future.done()]
            self._forget_idle(loop.time())
            if not self.waiters:
                return
            next_due = min(self.schedules[w.ref.job_id].due for w in self.waiters)
            self._wake.clear()
            if next_due > loop.time():
                try:
                    await asyncio.wait_for(self._wake.wait(), next_due - loop.time())
                    continue  # a new waiter arrived: recompute when to poll
                except TimeoutError:
                    pass
            refs = list({w.ref.job_id: w.ref for w in self.waiters}.values())  # one entry per job
            self.polls += 1
            polled_at = loop.time()  # cadence counts from the poll's start, not its end
            try:
                states = await asyncio.to_thread(resolve_states, refs)
            except (
                Exception
            ) as exc:  # persistent errors reach the waiters; backends retry transient ones
                for w in self.waiters:
                    if not w.future.done():
                        w.future.set_exception(exc)
                continue
            by_job = {state.job_id: state for state in states}
            for w in self.waiters:
                state = by_job.get(w.ref.job_id)
                if state is not None and state.terminal and not w.future.done():
                    w.future.set_result(state)
            for job_id, state in by_job.items():
                if state.terminal:
                    self.schedules.pop(job_id, None)
                else:
                    schedule = self.schedules[job_id]
                    schedule.due = polled_at + next(schedule.delays)

    def _forget_idle(self, now: float) -> None:
        """Drop schedules of jobs nobody has waited on for a while (bounded memory)."""
        waited = {w.ref.job_id for w in self.waiters}
        for job_id in [
            j for j, s in self.schedules.items() if j not in waited and now - s.last_waited > 300
        ]:
            del self.schedules[job_id]


_pollers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, SharedPoller] = (
    weakref.WeakKeyDictionary()
)


def shared_poller() -> SharedPoller:
    """The shared poller of the running event loop (created on first use)."""
    loop = asyncio.get_running_loop()
    poller = _pollers.get(loop)
    if poller is None:
        poller = _pollers[loop] = SharedPoller()
    return poller
