"""THE status resolution: storage evidence + backend state + deadlines, in one place.

Order of truth: the job's ``outcome.json`` (created once by whoever decided first: the
runner, ``cancel()``, a deadline, or a resolution that sealed what it saw) decides, and
once it exists the terminal state never changes, whatever the backend still says (its
last status update may have been lost: storage beats a stale RUNNING/PENDING). Without
an outcome: the backend's state, checked against ``schedule_timeout`` and ``life_span``;
then a finished record / result envelope (SUCCEEDED or FAILED); a backend exit; a job
the backend lost without a result is FAILED with reason ``Lost`` (at once when the
launch was recorded and the backend no longer knows the job: someone deleted it). A terminal state found without an
outcome is sealed into one (best effort: read-only storage cannot). Backends are asked in
bulk: one ``poll`` per backend (per scope and options) for all jobs passed in.

How long a job the backend does not show may stay unseen before it is ``Lost`` is the
target's ``lost_grace`` (default 120 s): here for a job never seen after its submit, and
in the Kubernetes backend for a pod whose node stopped reporting.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from kinetic_core.backends import Backend, BackendState, get_backend, running
from kinetic_core.config.target import DEFAULT_LOST_GRACE, Target
from kinetic_core.control import recovery
from kinetic_core.errors import KineticError
from kinetic_core.records import history
from kinetic_core.records.evidence import Evidence, read_evidence
from kinetic_core.records.lifecycle import BY_RUNNER, decide, read_outcome
from kinetic_core.states import JobRef, JobState, JobStatus, Reason, timestamp
from kinetic_core.storage import Storage, open_storage

log = logging.getLogger(__name__)

# Backends enforce life_span themselves; this is the fallback after that much extra time.
DEADLINE_GRACE = 30.0
#: A stop decided this recently is still being carried out by its decider (its delete
#: follows the record within a moment): observers leave it to the decider that long.
STOP_IN_FLIGHT = 10.0


# Targets rebuilt from stored ones, by (stored target, handle's key): a Target is frozen
# and rebuilding one (its validation included) cost more than the poll of a local job.
_targets: dict[tuple[str, str | None], Target] = {}
_TARGETS_MAX = 256


def _target_key(ref: JobRef) -> tuple[str, str | None]:
    stored = getattr(ref, "target_key", None)  # JobHandle computes it once
    if not isinstance(stored, str):
        stored = json.dumps(ref.target, sort_keys=True, default=repr)
    return stored, getattr(ref, "signing_key", None)


def backend_for(ref: JobRef, key: tuple[str, str | None] | None = None) -> Backend:
    """The backend of ``ref``'s job, with the signing key the handle was given (a stored
    target carries none; without one, the key in force in this process's environment).
    ``get_backend`` is asked at every call: its cache key reads the environment, so a
    rotated key counts."""
    key = key or _target_key(ref)
    target = _targets.get(key)
    if target is None:
        if len(_targets) >= _TARGETS_MAX:
            _targets.clear()
        target = Target.from_stored(ref.target)
        target = _targets[key] = dataclasses.replace(target, signing_key=key[1])
    return get_backend(target)


def backends_for(refs: Sequence[JobRef]) -> list[Backend]:
    """``backend_for`` of each ref, resolved once per distinct stored target and signing
    key in this call: thousands of waited jobs usually share one target, and rebuilding
    it (and the backend's cache key, which reads the environment) per job was most of a
    shared poller's tick. Each call still asks ``get_backend`` afresh."""
    resolved: dict[tuple[str, str | None], Backend] = {}
    out = []
    for ref in refs:
        key = _target_key(ref)
        backend = resolved.get(key)
        if backend is None:
            backend = resolved[key] = backend_for(ref, key)
        out.append(backend)
    return out


def resolve_states(
    refs: Sequence[JobRef], *, enforce: bool = True, previous: Mapping[str, JobState] | None = None
) -> list[JobState]:
    """States of many jobs: one bulk backend poll per scope, storage read only when needed.

    With ``enforce``, jobs past ``schedule_timeout`` or ``life_span`` are stopped here.
    A job that was recovered reads as its newest attempt (see ``recovery``); every
    transition seen is recorded in the job's history. ``previous`` (job id -> the last
    state a poller kept) is returned in place of an equal new state: a shared poller's
    tick over thousands of unchanged jobs then keeps no new objects alive, which the
    collector would promote and, every few ticks, pay for with a full collection of the
    process (0.2-0.4 s event-loop stalls of a triggerer holding 5,000 waits). A kept state
    was noted in the job's history when it was new, so it is not noted again.
    """
    current = [recovery.current(ref) for ref in refs]
    return _follow_recoveries(current, _resolve_all(current, enforce, previous), enforce)


def _follow_recoveries(refs: list[JobRef], states: list[JobState], enforce: bool) -> list[JobState]:
    """For each terminal state: follow (or start) the next attempt, and report its state
    instead; successors are resolved in bulk, hop by hop. While a successor cannot start
    yet (the old attempt's processes are still stopping) the job reads PENDING
    ``Recovering``; a transient backend error while starting one is raised (the caller's
    wait rides it out): a job whose next attempt may have been launched never reads ended."""
    out = list(states)
    refs = list(refs)
    pending = [i for i, s in enumerate(out) if s.terminal]
    while pending:
        moved = []
        for i in pending:
            try:
                nxt = recovery.successor(refs[i], out[i])
            except recovery.OldAttemptRunning as exc:
                out[i] = recovery.recovering(out[i], exc)
                continue
            if nxt is not None:
                moved.append((i, nxt))
        if not moved:
            break
        for (i, nxt), state in zip(
            moved, _resolve_all([n for _, n in moved], enforce), strict=True
        ):
            refs[i], out[i] = nxt, state
        pending = [i for i, _ in moved if out[i].terminal]
    return out


def _resolve_all(
    refs: Sequence[JobRef], enforce: bool, previous: Mapping[str, JobState] | None = None
) -> list[JobState]:
    # Keyed by the backend instance (cached per scope and options, e.g. lost_grace): jobs
    # whose targets differ only in such an option are polled by their own backend.
    groups: dict[int, list[int]] = defaultdict(list)
    backends: dict[int, Backend] = {}
    scope_of: list[int] = []
    for i, backend in enumerate(backends_for(refs)):
        backends[id(backend)] = backend
        groups[id(backend)].append(i)
        scope_of.append(id(backend))
    now = time.time()
    outcomes = [read_outcome(open_storage(ref.storage), ref.job_id) for ref in refs]
    backend_states: dict[int, BackendState] = {}
    for scope, indexes in groups.items():
        backend = backends[scope]
        asked = [i for i in indexes if needs_backend(backend, outcomes[i], now)]
        polled = backend.poll([refs[i].job_id for i in asked]) if asked else {}
        for i in indexes:
            backend_states[i] = polled.get(refs[i].job_id, BackendState("not_found"))
    states = []
    for i, ref in enumerate(refs):
        state = _resolve_one(
            ref, backend_states[i], backends[scope_of[i]], now, enforce, outcomes[i]
        )
        kept = previous.get(state.job_id) if previous else None
        if kept == state:  # noted when the poller first kept it: nothing new to record
            states.append(kept)
            continue
        states.append(state)
        history.note(open_storage(ref.storage), state, ref)
    return states


def lost_grace(target: dict[str, Any]) -> float:
    """The target's ``lost_grace``: seconds a job the backend does not show may stay
    unseen (being submitted, or on an unreachable node) before it reads Lost."""
    return float(target.get("lost_grace") or DEFAULT_LOST_GRACE)


def _pending_limit(
    target: dict[str, Any], b: BackendState, created_at: float
) -> tuple[str, str, float]:
    """(the Target field bounding this wait, the reason when it is exceeded, since when).

    A job waiting for its queue's admission (``Queued``) is bounded by ``queue_timeout``
    from its creation; once admitted, ``schedule_timeout`` counts from the admission (the
    backend's ``started_at`` of a pending queued job), never the time spent queued."""
    if b.reason == Reason.QUEUED:
        return "queue_timeout", Reason.QUEUE_TIMEOUT, created_at
    since = (b.started_at or created_at) if target.get("queue") else created_at
    return "schedule_timeout", Reason.SCHEDULE_TIMEOUT, since


@dataclasses.dataclass
class _Seen:
    """What storage and the backend say of one job at one moment (``_observe``)."""

    ref: JobRef
    storage: Storage
    backend: BackendState
    now: float
    outcome: dict[str, Any] | None  # the create-only decision, when one exists
    evidence: Evidence | None = None  # read only when the backend no longer runs the job


def _resolve_one(
    ref: JobRef,
    b: BackendState,
    backend: Backend,
    now: float,
    enforce: bool,
    outcome: dict[str, Any] | None,
) -> JobState:
    """Observe, enforce the limits, decide, seal, carry out: each step its own function.
    ``outcome``: the job's outcome as read before the backend was polled."""
    seen = _observe(ref, b, backend, now, outcome)
    if enforce and (passed := _limit_passed(seen)) is not None:
        stopped = _stop(seen, backend, *passed)
        if stopped is not None:
            return stopped
    found = _decide(seen)
    if seen.outcome is not None:
        carry_out(seen.ref.job_id, seen.outcome, seen.backend, backend, seen.now)
        return found
    return _seal(seen, found) if found.terminal else found


def needs_backend(backend: Backend, outcome: dict[str, Any] | None, now: float) -> bool:
    """Whether resolving a job asks its backend. Not where the backend lets storage decide
    (``decided_by_storage``) and nothing is left to carry out: an outcome the runner
    decided (its process ends on its own), or a stop decided within ``STOP_IN_FLIGHT``
    (its decider is deleting it). Every other job is polled: undecided, or a decided stop
    an observer may have to carry out (``undone``). Saves a Kubernetes round trip's polls
    (API requests) after the runner's decision."""
    if outcome is None or not getattr(backend, "decided_by_storage", False):
        return True
    return outcome.get("by") != BY_RUNNER and _stop_overdue(outcome, now)


def _stop_overdue(outcome: dict[str, Any], now: float) -> bool:
    """A stop decided more than ``STOP_IN_FLIGHT`` ago (or at an unknown time)."""
    at = outcome.get("at")
    return not isinstance(at, int | float) or now - at >= STOP_IN_FLIGHT


def undone(outcome: dict[str, Any] | None, b: BackendState, now: float) -> bool:
    """A decided end that the backend does not honour yet: the outcome was decided by
    anyone but the runner (a cancel, a limit, a sealed observation: each means "no
    process of this job runs"), past ``STOP_IN_FLIGHT`` (its decider is no longer
    deleting it), and the backend still runs the job, its processes not already being
    stopped (``Terminating``: their grace period is respected)."""
    if outcome is None or outcome.get("by") == BY_RUNNER or not running(b):
        return False
    if b.reason == Reason.TERMINATING:
        return False
    return _stop_overdue(outcome, now)


def carry_out(
    job_id: str, outcome: dict[str, Any] | None, b: BackendState, backend: Backend, now: float
) -> None:
    """Make a decided end true: whoever observes a decided stop while the backend still
    runs the job stops it (idempotent: ``cancel`` of a stopping or gone job is a no-op).
    The canceller's delete may have failed (an outage after its record) or never come
    (it was killed in between); the state read stays the decided one either way. A
    failure here is logged: the next observer tries again."""
    if not undone(outcome, b, now):
        return
    log.warning(
        "kinetic: job %s was decided %s (%s) but the backend still runs it: stopping it",
        job_id,
        (outcome or {}).get("status"),
        (outcome or {}).get("by"),
    )
    try:
        backend.cancel(job_id)
    except KineticError as exc:
        log.warning(
            "kinetic: could not stop job %s (the next observer tries again): %s", job_id, exc
        )


def _observe(
    ref: JobRef, b: BackendState, backend: Backend, now: float, outcome: dict[str, Any] | None
) -> _Seen:
    """The job's outcome, and the evidence storage holds once the backend runs it no more.
    ``outcome`` was read before the poll: while the backend still runs the job, an
    outcome written since changes nothing a later read will not show (the job reads
    running a moment longer); once it does not, storage is read again, after the poll."""
    storage = open_storage(ref.storage)
    seen = _Seen(ref, storage, b, now, outcome)
    if seen.outcome is not None or b.phase in ("pending", "running"):
        return seen
    seen.outcome = read_outcome(storage, ref.job_id)
    if seen.outcome is not None:
        return seen
    seen.evidence = ev = read_evidence(storage, ref.job_id)
    if b.phase == "not_found" and ev.launched and not (ev.finished or ev.stop):
        # The poll may predate the launch: a launcher records launched.json once the
        # backend took the job, so a poll made now sees it unless it was deleted.
        again = backend.poll([ref.job_id]).get(ref.job_id, b)
        if again.phase != "not_found":
            return _observe(ref, again, backend, time.time(), None)
    return seen


def _limit_passed(seen: _Seen) -> tuple[JobStatus, str, str] | None:
    """(status, reason, message) when an undecided job is past ``schedule_timeout`` /
    ``queue_timeout`` while pending, or ``life_span`` while running."""
    ref, b = seen.ref, seen.backend
    if seen.outcome is not None:
        return None
    if b.phase == "pending":
        name, reason, since = _pending_limit(ref.target, b, ref.created_at)
        limit = ref.target.get(name)
        if limit and seen.now - since > limit:
            return (
                JobStatus.FAILED,
                reason,
                f"still {'queued' if reason == Reason.QUEUE_TIMEOUT else 'pending'} after "
                f"{name}={limit:g}s" + (f" ({b.reason}: {b.message})" if b.reason else ""),
            )
    if b.phase == "running":
        limit = ref.target.get("life_span")
        if limit and b.started_at and seen.now - b.started_at > limit + DEADLINE_GRACE:
            return (
                JobStatus.FAILED,
                Reason.DEADLINE_EXCEEDED,
                f"ran longer than life_span={limit:g}s",
            )
    return None


def _decide(seen: _Seen) -> JobState:
    """The job's state from what was seen (no writes): its outcome decides; else the
    backend while it runs the job; else the evidence in storage."""
    b = seen.backend
    if seen.outcome is not None:
        return _decided(seen, seen.outcome)
    if b.phase == "pending":
        return _state(seen, JobStatus.PENDING, b.reason, b.message)
    if b.phase == "running":
        return _state(seen, JobStatus.RUNNING, b.reason, b.message)
    return _from_evidence(seen, seen.evidence or Evidence())


def _seal(seen: _Seen, found: JobState) -> JobState:
    """Seal a terminal state seen without an outcome, so a late decider (a cancel, a
    runner) cannot change it; the state of whoever decided first wins."""
    ref = seen.ref
    try:
        won, winner = decide(
            seen.storage,
            ref.job_id,
            found.status.value,
            found.reason,
            found.message,
            by="status",
            created_at=ref.created_at,
            exit_code=found.exit_code,
            # Only a never-started end is recorded: a start shows in started.json anyway,
            # and an unknown one stays unsaid (the record of every other end is unchanged).
            **({"ran": False} if found.ran is False else {}),
        )
    except (KineticError, OSError) as exc:
        log.debug(
            "kinetic: cannot seal the outcome of %s (read-only storage?): %s", ref.job_id, exc
        )
        return found
    return found if won or winner is None else _decided(seen, winner)


def _state(
    seen: _Seen,
    status: JobStatus,
    reason: str | None,
    message: str | None,
    ev: Evidence | None = None,
    ran: bool | None = None,
) -> JobState:
    """``ran``: what the caller knows of the runner's start; the runner's own started
    record overrides it, and without either the backend's word counts."""
    ref, b = seen.ref, seen.backend
    ev = ev or Evidence()
    started = (ev.started or {}).get("at") or b.started_at
    finished = (ev.finished or {}).get("at") or b.finished_at or (ev.stop or {}).get("at")
    exit_code = b.exit_code if b.exit_code is not None else (ev.finished or {}).get("exit_code")
    return JobState(
        job_id=ref.job_id,
        status=status,
        reason=Reason.of(reason),
        message=message,
        exit_code=exit_code,
        created_at=timestamp(ref.created_at),
        started_at=timestamp(started),
        finished_at=timestamp(finished) if status.terminal else None,
        attempt=ref.attempt,
        collected=status is JobStatus.SUCCEEDED and ev.collected is not None,
        recoveries=getattr(ref, "recoveries", 0) or 0,
        lost_seconds=getattr(ref, "lost_seconds", 0.0) or 0.0,
        ran=True if ev.started is not None else ran if ran is not None else b.ran,
    )


def _decided(seen: _Seen, outcome: dict[str, Any]) -> JobState:
    """The state an outcome decided, with the evidence of the attempt's times."""
    ev = read_evidence(seen.storage, seen.ref.job_id)
    # A stop, a seal, or a runner between its outcome and its finished record: the
    # outcome carries what the finished record does not (yet) say.
    known = {k: v for k, v in (ev.finished or {}).items() if v is not None}
    ev.finished = {"at": outcome.get("at"), "exit_code": outcome.get("exit_code"), **known}
    ran = outcome.get("ran")  # recorded by a seal that knew it never started
    return _state(
        seen,
        JobStatus(outcome["status"]),
        outcome.get("reason"),
        outcome.get("message"),
        ev,
        ran if isinstance(ran, bool) else None,
    )


def _from_evidence(seen: _Seen, ev: Evidence) -> JobState:
    """The state of a job the backend no longer runs, from what storage holds."""
    ref, b = seen.ref, seen.backend
    if ev.finished is not None:
        if ev.finished.get("success"):
            return _state(seen, JobStatus.SUCCEEDED, None, None, ev)
        return _state(
            seen,
            JobStatus.FAILED,
            Reason.ERROR,
            ev.finished.get("error") or "the function raised",
            ev,
        )
    if ev.stop is not None:
        return _state(
            seen, JobStatus(ev.stop["status"]), ev.stop.get("reason"), ev.stop.get("message"), ev
        )
    if b.phase == "exited":
        reason = b.reason if b.reason not in (None, Reason.COMPLETED) else Reason.LOST
        message = b.message or f"exited with code {b.exit_code} without storing a result"
        return _state(seen, JobStatus.FAILED, reason, message, ev)
    if b.phase == "gone":
        return _state(
            seen,
            JobStatus.FAILED,
            Reason.LOST,
            b.message or "the job vanished without a result",
            ev,
        )
    # not_found. A recorded launch means the backend had the job: it was deleted. Its
    # runner never started unless it recorded a start (``_state`` reads started.json).
    if ev.launched is not None:
        return _state(
            seen,
            JobStatus.FAILED,
            Reason.LOST,
            f"{b.message or 'the backend has no record of the job'}; it was launched at "
            f"{timestamp(ev.launched.get('at'))} and deleted before storing a result "
            "(not by kinetic: a cancel would say so)",
            ev,
            ran=False,
        )
    # Young jobs are still being submitted: the runner can even have started
    # before the submitter recorded the launch (a zygote forks in about a millisecond).
    if seen.now - ref.created_at < lost_grace(ref.target):
        return _state(seen, JobStatus.PENDING, Reason.SUBMITTING, "submission in progress", ev)
    return _state(
        seen,
        JobStatus.FAILED,
        Reason.LOST,
        b.message or "the backend has no record of the job and no result was stored",
        ev,
        ran=False,
    )


def _stop(
    seen: _Seen, backend: Backend, status: JobStatus, reason: str, message: str
) -> JobState | None:
    """Decide a limit's outcome and stop the job. None when the runner decided first
    (its process is finishing on its own)."""
    ref = seen.ref
    won, winner = decide(
        seen.storage,
        ref.job_id,
        status.value,
        reason,
        message,
        by="limit",
        created_at=ref.created_at,
    )
    if not won and winner is not None and winner.get("by") == BY_RUNNER:
        return None
    backend.cancel(ref.job_id)
    if won or winner is None:  # None: unreadable winner; the limit was passed all the same
        winner = {"status": status.value, "reason": reason, "message": message}
    return _decided(seen, winner)
