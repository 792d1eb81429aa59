"""Every wait of the library: the sync tick loop, its async twin, and the shared poller.

Ticks are adaptive (``util/waits.py``, the schedule every wait shares): the first come fast
so short jobs finish with low latency, then settle at the configured interval.

The shared poller is one per process and runs on the process's background event loop;
every async waiter, from any event loop (an Airflow triggerer, Prefect's per-thread
loops), registers its handle there, and one ``resolve_states`` call per tick covers them
all (one bulk backend poll per scope), run in a worker thread so no loop ever blocks on
a backend or storage call.

Both loops can report each observed transition (``on_status_change``, see
``StatusChanges``): from the states the wait polls anyway, never with a poll of its own.

Both loops ride out a backend outage: a poll that fails with a transient ``BackendError``
(the backend already retried it) is logged and the wait goes on, up to ``OUTAGE_LIMIT``
of continuous failure; past the caller's timeout the wait ends with ``WaitTimeout``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from kinetic_core.control.resolution import backends_for, resolve_states
from kinetic_core.errors import BackendError, ConfigError, WaitTimeout
from kinetic_core.states import JobRef, JobState
from kinetic_core.util.waits import delays, ticks

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")
#: An async predicate checked on every tick; when it returns True the wait stops early
#: (e.g. "the orchestrator is cancelling this run").
Until = Callable[[], Awaitable[bool]]
#: Called with each new JobState a wait observes (sync; or, in an async wait, async too).
OnStatusChange = Callable[[JobState], Any]

DEFAULT_INTERVAL = 5.0
COALESCE = 0.02  # async waiters registering within this window share their first poll
#: A shared tick also polls jobs due within this fraction of their interval: waiters that
#: registered at different times share ticks instead of each forcing its own.
EARLY = 0.25
#: Waiters completed (and outcomes handed to a caller loop) per loop iteration: a wave of
#: thousands of jobs ending at once must not block either loop for seconds.
DELIVER_SLICE = 20
OUTAGE_LIMIT = 900.0  # seconds of continuously failing polls a wait rides out
OUTAGE_LOG_EVERY = 60.0


@dataclass
class Outage:
    """Transient backend failures of one wait: tolerated (and logged) while they last less
    than ``OUTAGE_LIMIT``; anything else is raised."""

    since: float | None = None
    logged: float = 0.0

    def failed(self, exc: BaseException) -> None:
        """Called from ``except``: returns to keep waiting, or re-raises ``exc``."""
        if not (isinstance(exc, BackendError) and exc.transient):
            raise exc
        now = time.monotonic()
        if self.since is None:
            self.since = now
        if now - self.since > OUTAGE_LIMIT:
            raise exc
        if now - self.logged >= OUTAGE_LOG_EVERY:
            self.logged = now
            log.warning(
                "kinetic: cannot reach the backend for %.0fs, still waiting (jobs are "
                "unaffected; gives up after %.0fs): %s",
                now - self.since,
                OUTAGE_LIMIT,
                exc,
            )

    def ok(self) -> None:
        if self.since is not None:
            log.warning(
                "kinetic: backend reachable again after %.0fs", time.monotonic() - self.since
            )
        self.since, self.logged = None, 0.0


class StatusChanges:
    """The transitions a wait observes, each reported once to ``callback``.

    A transition is a new (status, reason) of one waited job (keyed by the job waited on:
    a recovered job's states name its newest attempt, and stay its transitions). The
    first state seen counts, so does the terminal one. A callback that raises is logged
    and the wait goes on: watching a job must never break waiting for it.
    """

    def __init__(self, callback: OnStatusChange) -> None:
        if not callable(callback):
            raise ConfigError(
                f"on_status_change must be a callable taking the JobState, got {callback!r}; "
                "pass a function (or an async function to aresult/await_), or None."
            )
        self.callback = callback
        self.seen: dict[str, tuple[str, str | None]] = {}

    @classmethod
    def of(cls, callback: OnStatusChange | None) -> StatusChanges | None:
        """None for no callback; ConfigError for one that cannot be called."""
        return None if callback is None else cls(callback)

    def _new(self, job_id: str, state: JobState) -> bool:
        key = (state.status.value, state.reason)
        if self.seen.get(job_id) == key:
            return False
        self.seen[job_id] = key
        return True

    def notify(self, job_id: str, state: JobState) -> None:
        """Report ``state`` of the job waited on as ``job_id`` if it is a transition."""
        if not self._new(job_id, state):
            return
        try:
            outcome = self.callback(state)
            if inspect.isawaitable(outcome):  # an async callback in a sync wait: run it here
                asyncio.run(_awaited(outcome))
        except Exception:
            self._failed(state)

    async def anotify(self, job_id: str, state: JobState) -> None:
        """Async ``notify``: an async callback is awaited (a sync one is called)."""
        if not self._new(job_id, state):
            return
        try:
            outcome = self.callback(state)
            if inspect.isawaitable(outcome):
                await outcome
        except Exception:
            self._failed(state)

    def _failed(self, state: JobState) -> None:
        log.exception(
            "kinetic: on_status_change raised for job %s (%s%s); the wait goes on",
            state.job_id,
            state.status.value,
            f" {state.reason}" if state.reason else "",
        )


async def _awaited(outcome: Awaitable[Any]) -> Any:
    return await outcome


def interval_of(ref: JobRef) -> float:
    return float(ref.target.get("poll_interval") or DEFAULT_INTERVAL)


def poll_ticks(
    *,
    interval: float,
    timeout: float | None,
    describe: Callable[[], str],
    watching: Callable[[], list[JobRef]] | None = None,
) -> Iterator[None]:
    """The sync wait loop (``util.waits.ticks``) of a wait on jobs: with ``watching`` (the
    handles still awaited), a backend that can tell when one of its jobs ends cuts the
    sleep short."""
    return ticks(
        interval=interval,
        timeout=timeout,
        describe=describe,
        sleep=lambda delay: _sleep(delay, watching() if watching is not None else []),
    )


def _sleep(delay: float, refs: list[JobRef]) -> None:
    """Sleep ``delay``, or less if the (single) backend of ``refs`` sees a job end first."""
    if refs:
        backends = {b.scope: b for b in backends_for(refs)}
        if len(backends) == 1:
            next(iter(backends.values())).sleep_until_change([r.job_id for r in refs], delay)
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


def unanswered_message(refs: list[JobRef]) -> str:
    more = f" and {len(refs) - 1} more" if len(refs) > 1 else ""
    return (
        f"still waiting for {refs[0].job_id if refs else '?'}{more}: the backend did not answer "
        "(an outage?). The job keeps running and its handle stays valid: wait again, or "
        "reattach later with kinetic_core.attach(job_id)."
    )


def wait_states(
    refs: list[JobRef],
    *,
    timeout: float | None = None,
    on_status_change: OnStatusChange | None = None,
) -> list[JobState]:
    """Block until every job is terminal; return their states in order. Each transition
    polled is passed to ``on_status_change`` (see ``StatusChanges``)."""
    changes = StatusChanges.of(on_status_change)
    latest: list[JobState] = []
    interval = min((interval_of(r) for r in refs), default=DEFAULT_INTERVAL)

    def describe() -> str:
        return timeout_message(latest) if latest else unanswered_message(refs)

    def watching() -> list[JobRef]:
        return [refs[i] for i, s in enumerate(latest) if not s.terminal] if latest else []

    outage = Outage()
    for _ in poll_ticks(interval=interval, timeout=timeout, describe=describe, watching=watching):
        try:
            if not latest:
                latest.extend(resolve_states(refs))
            else:
                pending = [i for i, s in enumerate(latest) if not s.terminal]
                states = resolve_states([refs[i] for i in pending])
                for i, state in zip(pending, states, strict=True):
                    latest[i] = state
        except BackendError as exc:
            outage.failed(exc)
            continue
        outage.ok()
        if changes is not None:
            for ref, state in zip(refs, latest, strict=True):
                changes.notify(ref.job_id, state)
        if all(s.terminal for s in latest):
            break
    return latest


# ---- async shared poller ---------------------------------------------------------------


@dataclass(eq=False)
class _Waiter:
    ref: JobRef
    future: asyncio.Future[JobState]
    #: Called (on the background loop) with every state polled for this waiter's job.
    observe: Callable[[JobState], None] | None = None


class _Handoff:
    """One waiter's coroutine between a caller's loop and the background loop: started
    there in a batch (``SharedPoller._start_inbox``), its outcome delivered back in a
    batch per caller loop (``_Outbox``); a cancelled caller cancels the coroutine."""

    def __init__(
        self,
        coro: Coroutine[Any, Any, JobState],
        loop: asyncio.AbstractEventLoop,
        done: asyncio.Future[JobState],
    ) -> None:
        self.coro, self.loop, self.done = coro, loop, done
        self.task: asyncio.Task[JobState] | None = None
        self.cancelled = False  # set on the caller's loop, read on the background loop

    def start(self) -> None:  # on the background loop
        if self.cancelled:
            self.coro.close()
            return
        self.task = asyncio.ensure_future(self.coro)
        self.task.add_done_callback(self.finished)

    def finished(self, task: asyncio.Task[JobState]) -> None:  # on the background loop
        _Outbox.of(self.loop).put(self.done, task)

    def caller_done(self, done: asyncio.Future[JobState]) -> None:  # on the caller's loop
        if done.cancelled():
            self.cancelled = True
            with contextlib.suppress(RuntimeError):  # the background loop is gone (fork)
                background_loop().call_soon_threadsafe(self._cancel)

    def _cancel(self) -> None:  # on the background loop
        if self.task is not None:
            self.task.cancel()


class _Outbox:
    """Outcomes for one caller loop, handed over in one wake-up per batch."""

    _boxes: dict[asyncio.AbstractEventLoop, _Outbox] = {}
    _guard = threading.Lock()

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.items: list[tuple[asyncio.Future[JobState], asyncio.Task[JobState]]] = []
        self.lock = threading.Lock()

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> _Outbox:
        with cls._guard:
            for closed in [x for x in cls._boxes if x.is_closed()]:
                del cls._boxes[closed]
            box = cls._boxes.get(loop)
            if box is None:
                box = cls._boxes[loop] = _Outbox(loop)
            return box

    def put(self, done: asyncio.Future[JobState], task: asyncio.Task[JobState]) -> None:
        with self.lock:
            self.items.append((done, task))
            first = len(self.items) == 1
        if first:
            with contextlib.suppress(RuntimeError):  # the waiter's loop closed: nobody waits
                self.loop.call_soon_threadsafe(self.deliver)

    def deliver(self) -> None:  # on the caller's loop
        """A slice of the outcomes, then the rest in later iterations: each completes a
        waiter whose caller resumes in the next one (a trigger firing its event)."""
        with self.lock:
            batch, self.items = self.items[:DELIVER_SLICE], self.items[DELIVER_SLICE:]
            if self.items:
                self.loop.call_soon(self.deliver)
        for done, task in batch:
            if done.done():
                continue
            if task.cancelled():
                done.cancel()
            elif (exc := task.exception()) is not None:
                done.set_exception(exc)
            else:
                done.set_result(task.result())


@dataclass
class _Schedule:
    """When a job is next due. Kept per job, so a waiter that re-registers (e.g. a trigger
    streaming logs between waits) continues the backoff instead of restarting it."""

    delays: Iterator[float]
    due: float
    last_waited: float
    interval: float
    changed: float = float("-inf")  # when the backend last said the job changed
    listened: bool = False  # its backend was asked for ``on_change`` (SharedPoller._poll)


@dataclass
class SharedPoller:
    """One per process: all async waiters share one bulk status call per tick.

    ``wait`` may be awaited from any event loop; the polling itself runs on the
    background loop. ``latest`` holds the last state polled of each job being waited on.
    """

    #: The waiters of each job waited on (dicts: registering and finishing are O(1)).
    waiters: dict[str, dict[_Waiter, None]] = field(default_factory=dict)
    schedules: dict[str, _Schedule] = field(default_factory=dict)
    latest: dict[str, JobState] = field(default_factory=dict)
    polls: int = 0  # resolve_states calls made: what the benchmarks and tests count
    outage: Outage = field(default_factory=Outage)
    _task: asyncio.Task[None] | None = None
    _wake: asyncio.Event | None = None
    #: Backends (by id) whose ``on_change`` wakes this poller: a job is polled at once
    #: when the backend sees it change (optional backend method; Kubernetes' watch).
    _listening: set[int] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _inbox: list[_Handoff] = field(default_factory=list)  # waiters not yet started
    _forgot: float = float("-inf")  # when idle schedules were last dropped

    async def wait(
        self,
        ref: JobRef,
        timeout: float | None = None,
        on_status_change: OnStatusChange | None = None,
    ) -> JobState:
        """Until the job is terminal. WaitTimeout after ``timeout``; the job keeps running.

        ``on_status_change`` gets each transition of the states this poller polls anyway
        (see ``StatusChanges``), on the caller's event loop: an async one is awaited, and
        the terminal state's call has returned before this does."""
        changes = StatusChanges.of(on_status_change)
        if changes is None:
            # Scheduled on the background loop at once, so it runs (and unregisters) even
            # if this waiter is cancelled before its first await.
            return await _within(self._hop(self._wait(ref)), ref, timeout)
        loop = asyncio.get_running_loop()
        seen: asyncio.Queue[JobState | None] = asyncio.Queue()

        def observe(state: JobState) -> None:  # on the background loop
            try:
                loop.call_soon_threadsafe(seen.put_nowait, state)
            except RuntimeError:  # the waiter's loop closed under it: nobody to tell
                pass

        waiting = self._hop(self._wait(ref, observe))
        report = asyncio.ensure_future(_report(ref.job_id, seen, changes))
        try:
            state = await _within(waiting, ref, timeout)
        except BaseException:
            report.cancel()
            raise
        # Every state observed was queued before the waiter's future completed here.
        seen.put_nowait(None)
        await report
        await changes.anotify(ref.job_id, state)
        return state

    def _hop(self, coro: Coroutine[Any, Any, JobState]) -> asyncio.Future[JobState]:
        """Run ``coro`` on the background loop; its result as a future of the caller's loop.

        Like ``asyncio.wrap_future(run_in_background(coro))``, but the hops between the two
        threads are batched: registrations made in one burst (a triggerer starting 5,000
        triggers) reach the background loop in one wake-up, and states delivered in one
        tick reach each caller's loop in one. One wake-up per waiter (a socket write that
        hands the GIL to the other thread) made registering 1,000 triggers stall their loop
        for seconds on 2 cores, and the same for a wave of jobs ending."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[JobState] = loop.create_future()
        source = _Handoff(coro, loop, done)
        done.add_done_callback(source.caller_done)
        with self._lock:
            self._inbox.append(source)
            first = len(self._inbox) == 1
        if first:
            background_loop().call_soon_threadsafe(self._start_inbox)
        return done

    def _start_inbox(self) -> None:
        """On the background loop: start every waiter handed over since the last call."""
        with self._lock:
            batch, self._inbox = self._inbox, []
        for handoff in batch:
            handoff.start()

    async def _wait(
        self, ref: JobRef, observe: Callable[[JobState], None] | None = None
    ) -> JobState:
        """Runs on the background loop: register, wake the poll task, await the state."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        schedule = self.schedules.get(ref.job_id)
        if schedule is None:
            steps = delays(interval_of(ref))
            # First poll a short window out, so a burst of new waiters shares it: they
            # arrive from other threads' loops, interleaved by the GIL's 5 ms switches.
            schedule = _Schedule(steps, now + max(next(steps), COALESCE), now, interval_of(ref))
            self.schedules[ref.job_id] = schedule
        schedule.last_waited = now
        waiter = _Waiter(ref, loop.create_future(), observe)
        if observe is not None and ref.job_id in self.latest:  # polled for another waiter
            observe(self.latest[ref.job_id])
        self.waiters.setdefault(ref.job_id, {})[waiter] = None
        if self._wake is None:
            self._wake = asyncio.Event()
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run(self._wake), name="kinetic-shared-poller")
        try:
            # Not shielded: a cancel of this wait cancels only its own future, and a shield's
            # future and callbacks were 12 more objects per waiter for every full collection.
            return await waiter.future
        finally:
            self._unregister(waiter)

    def _unregister(self, waiter: _Waiter) -> None:
        job_waiters = self.waiters.get(waiter.ref.job_id)
        if job_waiters is not None:
            job_waiters.pop(waiter, None)
            if not job_waiters:
                del self.waiters[waiter.ref.job_id]

    async def _run(self, wake: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._forget_idle(loop.time())
            if not self.waiters:
                return
            next_due = min(self.schedules[job_id].due for job_id in self.waiters)
            wake.clear()
            if next_due > loop.time():
                try:
                    await asyncio.wait_for(wake.wait(), next_due - loop.time())
                    continue  # a new waiter arrived: recompute when to poll
                except TimeoutError:
                    pass
            refs = self._due(loop.time())
            self.polls += 1
            polled_at = loop.time()  # cadence counts from the poll's start, not its end
            try:
                fresh = [r for r in refs if not self.schedules[r.job_id].listened]
                states = await asyncio.to_thread(self._poll, refs, fresh, loop)
                for ref in fresh:
                    self.schedules[ref.job_id].listened = True
                self.outage.ok()
            except Exception as exc:
                try:  # an outage is ridden out; persistent errors reach the waiters
                    self.outage.failed(exc)
                except Exception:
                    for ws in list(self.waiters.values()):
                        for w in ws:
                            if not w.future.done():
                                w.future.set_exception(exc)
                    self.waiters.clear()
                    continue
                for ref in refs:
                    if (schedule := self.schedules.get(ref.job_id)) is not None:
                        schedule.due = polled_at + next(schedule.delays)
                continue
            await self._deliver(refs, states, polled_at, loop)

    def _due(self, now: float) -> list[JobRef]:
        """One ref per waited job due now (or within ``EARLY`` of its interval)."""
        refs = []
        for job_id, job_waiters in self.waiters.items():
            schedule = self.schedules[job_id]
            if schedule.due <= now + EARLY * schedule.interval:
                refs.append(next(iter(job_waiters)).ref)
        return refs

    async def _deliver(
        self,
        refs: list[JobRef],
        states: list[JobState],
        polled_at: float,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        """Hand each polled state to its job's waiters, ``DELIVER_SLICE`` jobs per loop
        iteration (a wave of endings completes thousands of waiters), and schedule the
        next poll of each job still running."""
        for start in range(0, len(refs), DELIVER_SLICE):
            if start:
                await asyncio.sleep(0)
            for ref, state in zip(
                refs[start : start + DELIVER_SLICE],
                states[start : start + DELIVER_SLICE],
                strict=True,
            ):
                # Keyed by the waited job: a recovered job's state names its newest attempt.
                self._deliver_one(ref.job_id, state, polled_at, loop)

    def _deliver_one(
        self, job_id: str, state: JobState, polled_at: float, loop: asyncio.AbstractEventLoop
    ) -> None:
        for w in list(self.waiters.get(job_id, ())):
            if w.future.done():
                continue
            if w.observe is not None:
                w.observe(state)
            if state.terminal:
                w.future.set_result(state)
        if state.terminal:
            self.schedules.pop(job_id, None)
            self.latest.pop(job_id, None)
            self.waiters.pop(job_id, None)  # each waiter's finally finds it gone
            return
        self.latest[job_id] = state
        schedule = self.schedules.get(job_id)
        if schedule is None:  # dropped while the poll ran: nobody waits any more
            return
        schedule.due = polled_at + next(schedule.delays)
        if schedule.changed >= polled_at:  # during the poll: it may have missed it
            schedule.due = loop.time()

    def _poll(
        self, refs: list[JobRef], fresh: list[JobRef], loop: asyncio.AbstractEventLoop
    ) -> list[JobState]:
        """One bulk status call (in a worker thread); then the backends of ``fresh`` (jobs
        polled for the first time) that can tell when a job changes are asked to (once
        per backend)."""
        states = resolve_states(refs, previous=self.latest)
        for backend in {id(b): b for b in backends_for(fresh)}.values():
            on_change = getattr(backend, "on_change", None)
            if on_change is not None and id(backend) not in self._listening:
                self._listening.add(id(backend))
                on_change(functools.partial(self._changed_threadsafe, loop))
        return states

    def _changed_threadsafe(self, loop: asyncio.AbstractEventLoop, job_id: str) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed (a forked child's old one)
            loop.call_soon_threadsafe(self._changed, loop, job_id)

    def _changed(self, loop: asyncio.AbstractEventLoop, job_id: str) -> None:
        """A backend saw the job change: poll it now if someone waits on it."""
        schedule = self.schedules.get(job_id)
        if schedule is None or self._wake is None:
            return
        if job_id in self.waiters:
            schedule.changed = loop.time()
            schedule.due = min(schedule.due, schedule.changed)
            self._wake.set()

    def _forget_idle(self, now: float) -> None:
        """Drop schedules of jobs nobody has waited on for a while (bounded memory);
        looked at once a minute, not at every tick over thousands of jobs."""
        if now - self._forgot < 60:
            return
        self._forgot = now
        for job_id in [
            j
            for j, s in self.schedules.items()
            if j not in self.waiters and now - s.last_waited > 300
        ]:
            del self.schedules[job_id]
            self.latest.pop(job_id, None)


async def _within(
    waiting: asyncio.Future[JobState], ref: JobRef, timeout: float | None
) -> JobState:
    """``waiting``'s state; WaitTimeout (the job keeps running) after ``timeout``."""
    if timeout is None:
        return await waiting  # no wait_for: one task fewer per waiter
    try:
        return await asyncio.wait_for(waiting, timeout)
    except TimeoutError:
        raise WaitTimeout(
            f"Timed out after {timeout:g}s waiting for job {ref.job_id}; it keeps running."
        ) from None


async def _report(
    job_id: str, seen: asyncio.Queue[JobState | None], changes: StatusChanges
) -> None:
    """Pass the states a waiter observes to its callback, in order, until None."""
    while (state := await seen.get()) is not None:
        await changes.anotify(job_id, state)


# ---- the process's background event loop ------------------------------------------------

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_poller: SharedPoller | None = None
_pid: int | None = None


def background_loop() -> asyncio.AbstractEventLoop:
    """The process's background event loop (a daemon thread), started on first use and
    again in a forked child. Every async wait of the process is served from it."""
    global _loop, _poller, _pid
    with _lock:
        if _loop is None or _pid != os.getpid() or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="kinetic-loop", daemon=True).start()
            _loop, _poller, _pid = loop, SharedPoller(), os.getpid()
        return _loop


def run_in_background(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Run ``coro`` on the background loop; cancelling the returned future cancels it."""
    return asyncio.run_coroutine_threadsafe(coro, background_loop())


async def on_background_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` on the background loop from any event loop (cancellation propagates)."""
    return await asyncio.wrap_future(run_in_background(coro))


def shared_poller() -> SharedPoller:
    """The process's shared poller (``polls`` counts its bulk status calls)."""
    background_loop()
    assert _poller is not None
    return _poller


async def stopped(until: Until | None) -> bool:
    return until is not None and await until()
