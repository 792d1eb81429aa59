"""Recovery: a recoverable end starts the next attempt of the job, exactly once.

A recoverable end is FAILED with a reason that is ``Reason.recoverable`` (``Preempted``: a
spot reclaim, a node shutdown, an eviction; ``Lost``: no process of the job is left and no
result was stored), or an exit code listed in ``Target.recover_on_exit_codes``; the job may
recover ``Target.max_recoveries`` times (default 3 with ``spot``, else 0). Recoveries are not
orchestrator retries: whoever resolves the job's status (``wait``, ``result``, the shared
poller behind the Airflow trigger and the Prefect task, a batch tracker, the CLI) starts
attempt n+1 of the job's idempotency key (``recovery:{job_id}`` for a job submitted
without one). The attempt's create-only ``handle.json`` is the lock, as in submission, so
ten observers at once create one job (its creator calls the ``on_job_recovered``
hook). Its call envelope is attempt n's, verified and
re-bound to the new id (never unpickled here). ``superseded.json`` of attempt n then
names its successor, and every handle of attempt n follows it transparently.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from typing import Any, TypeVar, cast

from kinetic_core.backends import Backend, BackendState, get_backend, running
from kinetic_core.config import hooks
from kinetic_core.config.target import Target
from kinetic_core.control.launching import AttemptTaken, create_attempt, launch_spec
from kinetic_core.errors import BackendError, CorruptRecord, KineticError, SubmissionError
from kinetic_core.records import layout
from kinetic_core.records.envelope import rebind_envelope
from kinetic_core.records.lifecycle import BY_RUNNER, read_json, read_outcome, write_record
from kinetic_core.states import JobRef, JobState, JobStatus, Reason, recoverable_reason
from kinetic_core.storage import Storage, open_storage
from kinetic_core.util import ids, signing
from kinetic_core.util.ids import keyed_id

log = logging.getLogger(__name__)

R = TypeVar("R", bound=JobRef)

SPOT_DEFAULT = 3

# Successors already followed by this process: superseded.json never changes.
_successors: dict[tuple[str, str], JobRef] = {}
_lock = threading.Lock()


def max_recoveries(target: dict[str, Any]) -> int:
    value = target.get("max_recoveries")
    if value is None:
        return SPOT_DEFAULT if target.get("spot") else 0
    return int(value)


def recoverable_end(ref: JobRef, state: JobState) -> bool:
    """Is this the kind of end a recovery restarts (whatever is left of the budget)?"""
    if state.status is not JobStatus.FAILED:
        return False
    codes = ref.target.get("recover_on_exit_codes") or []
    return recoverable_reason(state.reason) or state.exit_code in codes


def recoverable(ref: JobRef, state: JobState) -> bool:
    """Does this end start another attempt under the job's policy?"""
    return recoverable_end(ref, state) and int(getattr(ref, "recoveries", 0) or 0) < (
        max_recoveries(ref.target)
    )


def recovery_key(ref: JobRef) -> str:
    """The key attempts of this job are numbered under (derived when it has none)."""
    return ref.idempotency_key or ids.recovery_key(ref.job_id)


def successor_id(ref: JobRef) -> str:
    return keyed_id(recovery_key(ref), ref.attempt + 1)


def current(ref: R) -> R:
    """The newest attempt of ``ref``'s job this process already knows (no I/O)."""
    while (nxt := _successors.get((ref.storage, ref.job_id))) is not None:
        ref = cast(R, nxt)  # a successor is made from its ref (``_next_ref``): same type
    return ref


class OldAttemptRunning(KineticError):
    """A process of the ended attempt is still alive: its successor waits for it."""


class RecoveryBlocked(OldAttemptRunning):
    """This observer cannot start the next attempt (a permission its credentials lack,
    storage it cannot write): the job stays ``Recovering`` until an observer that can
    act does. Never a terminal state: another observer may still recover it."""


#: Errors starting a successor that no observer can get past: the recovery is given up
#: for good (recorded create-only in ``superseded.json``) and the job ends as attempt n.
FINAL_RECOVERY_ERRORS: tuple[type[KineticError], ...] = (SubmissionError, CorruptRecord)


def recovering(state: JobState, why: OldAttemptRunning) -> JobState:
    """The state of a job whose ended attempt's processes are still stopping, or whose
    recovery this observer cannot start: PENDING ``Recovering`` until its successor
    can start (the message says what it waits for)."""
    return dataclasses.replace(
        state,
        status=JobStatus.PENDING,
        reason=Reason.RECOVERING,
        message=str(why),
        finished_at=None,
    )


def successor(ref: JobRef, state: JobState) -> JobRef | None:
    """The attempt that recovered ``ref``: recorded, or started now if its end is
    recoverable; None when the job ends here. Raises ``OldAttemptRunning`` while the old
    attempt's processes are stopping, and a transient ``BackendError`` when the next
    attempt's launch may or may not have reached the backend."""
    if not recoverable_end(ref, state):
        return None  # no storage read for the jobs that end as they ended
    storage = open_storage(ref.storage)
    record = read_json(storage, layout.job_file(ref.job_id, layout.SUPERSEDED))
    if record is not None and record.get("job_id") == ref.job_id and record.get("given_up"):
        return None  # given up for good: nobody recovers it afterwards
    found = _recorded(storage, ref, record)
    if found is None and recoverable(ref, state):
        try:
            found = _start(storage, ref, state)
        except OldAttemptRunning:
            raise
        except FINAL_RECOVERY_ERRORS as exc:
            _give_up(storage, ref, exc)
            return _recorded(storage, ref)  # a racing observer's successor, if it was first
        except BackendError as exc:
            if exc.transient:
                raise
            raise _blocked(ref, state, exc) from exc
        except (KineticError, OSError) as exc:
            raise _blocked(ref, state, exc) from exc
    if found is not None:
        with _lock:
            _successors[(ref.storage, ref.job_id)] = found
    return found


def _blocked(ref: JobRef, state: JobState, exc: Exception) -> RecoveryBlocked:
    """This observer cannot start the next attempt: the job reads ``Recovering`` with why
    (the missing permission), not the end of attempt n, which a later observer with the
    rights would turn into a success (a terminal state that flips)."""
    log.warning("kinetic: cannot recover job %s from this process: %s", ref.job_id, exc)
    return RecoveryBlocked(
        f"attempt {ref.attempt} ({ref.job_id}) ended {state.reason}; its recovery cannot "
        f"start from this process: {exc}. It starts when an observer that can (e.g. with "
        "the permission granted) reads the job's state"
    )


def _give_up(storage: Storage, ref: JobRef, exc: Exception) -> None:
    """Record, create-only, that the job is not recovered: every observer then reads
    attempt n's end, and none starts a successor afterwards."""
    log.warning("kinetic: the recovery of job %s is given up: %s", ref.job_id, exc)
    write_record(
        storage,
        ref.job_id,
        layout.SUPERSEDED,
        create_only=True,
        given_up=True,
        error=f"{type(exc).__name__}: {exc}",
    )


def _next_ref(ref: JobRef, record: dict[str, Any]) -> JobRef:
    handle: Any = ref  # a JobHandle: a dataclass, and the successor's handle is a copy
    return cast(
        JobRef,
        dataclasses.replace(
            handle,
            job_id=successor_id(ref),
            attempt=ref.attempt + 1,
            created_at=float(record["created_at"]),
            idempotency_key=recovery_key(ref),
            recoveries=int(getattr(ref, "recoveries", 0) or 0) + 1,
            lost_seconds=float(getattr(ref, "lost_seconds", 0.0) or 0.0)
            + float(record.get("lost_seconds") or 0.0),
            recovered_from=ref.job_id,
            reattached=False,
        ),
    )


def _recorded(storage: Storage, ref: JobRef, record: dict[str, Any] | None = None) -> JobRef | None:
    if record is None:
        record = read_json(storage, layout.job_file(ref.job_id, layout.SUPERSEDED))
    # Bound to the job: it must name this job and the one id its successor can have.
    if (
        record is None
        or record.get("job_id") != ref.job_id
        or record.get("successor") != successor_id(ref)
        or not isinstance(record.get("created_at"), int | float)
    ):
        return None
    return _next_ref(ref, record)


def _lost_seconds(state: JobState) -> float:
    """The attempt's running time: at most this much work was lost (less with
    checkpoints). A lost job has no end time: it counts until it was found lost."""
    if not state.started_at:
        return 0.0
    end = state.finished_at.timestamp() if state.finished_at else time.time()
    return max(0.0, end - state.started_at.timestamp())


def _start(storage: Storage, ref: JobRef, state: JobState) -> JobRef:
    """Create and launch the next attempt, or find (and launch) the one a racing observer
    or an interrupted earlier try created. ``superseded.json`` names it only once the
    backend took it, so nobody follows an attempt that may never run."""
    signing_key = signing.key_in_force(getattr(ref, "signing_key", None))
    target = dataclasses.replace(Target.from_stored(ref.target), signing_key=signing_key)
    _stop_old_attempt(get_backend(target), ref)
    record = {
        "successor": successor_id(ref),
        "created_at": time.time(),
        "reason": state.reason,
        "message": state.message,
        "exit_code": state.exit_code,
        "lost_seconds": _lost_seconds(state),
    }
    nxt = _next_ref(ref, record)
    spec = launch_spec(nxt.job_id, ref.storage, target, ref.tags or {})
    created = True
    try:
        create_attempt(
            storage,
            spec,
            nxt.record(),
            write_payload=lambda fh: rebind_envelope(
                storage,
                layout.job_file(ref.job_id, layout.PAYLOAD),
                fh,
                kind="call",
                job_id=ref.job_id,
                new_job_id=nxt.job_id,
                signing_key=signing_key,
            ),
        )
    except AttemptTaken:  # another observer (or a resubmission of the key) was first
        created = False
        created_at = _created_at(storage, nxt.job_id)
        record["created_at"] = created_at if created_at is not None else record["created_at"]
        if read_json(storage, layout.job_file(nxt.job_id, layout.LAUNCHED)) is None:
            # Its creator may have died, or lost the backend's answer: launching is
            # idempotent per job id, so launch it (again).
            create_attempt(storage, spec, nxt.record(), write_payload=None)
    write_record(storage, ref.job_id, layout.SUPERSEDED, create_only=True, **record)
    nxt = _recorded(storage, ref) or _next_ref(ref, record)
    if created:
        hooks.fire("on_job_recovered", hooks.public(ref), hooks.public(nxt))
        log.warning(
            "kinetic: job %s ended %s (%s); recovery %d of %d started as %s",
            ref.job_id,
            state.status.value,
            state.reason,
            nxt.recoveries,
            max_recoveries(ref.target),
            nxt.job_id,
        )
    return nxt


def _stop_old_attempt(backend: Backend, ref: JobRef) -> None:
    """Stop every process of the ended attempt and see it gone before its successor
    starts: two runs of one job never overlap. (A node lost to a partition cannot confirm;
    the backend reads its pods as presumed dead, and the runner fences a late start.)"""
    backend.cancel(ref.job_id)
    if running(backend.poll([ref.job_id]).get(ref.job_id, BackendState("not_found"))):
        raise OldAttemptRunning(
            f"attempt {ref.attempt} ({ref.job_id}) ended; its processes are still stopping, "
            f"then attempt {ref.attempt + 1} starts"
        )


def wait_attempt_gone(backend: Backend, ref: JobRef, timeout: float) -> None:
    """Before a new attempt of ``ref``'s key starts (a keyed resubmit of an ended job):
    every process of the ended attempt is stopped and gone, so two runs of one key never
    overlap. A stop decided by anyone but the runner is carried out (the runner's own end
    is let finish); ``OldAttemptRunning`` when its processes outlast ``timeout``."""
    deadline = time.monotonic() + timeout
    stopped = False
    while running(backend.poll([ref.job_id]).get(ref.job_id, BackendState("not_found"))):
        if not stopped:
            outcome = read_outcome(open_storage(ref.storage), ref.job_id)
            if outcome is None or outcome.get("by") != BY_RUNNER:
                backend.cancel(ref.job_id)
            stopped = True
        if time.monotonic() >= deadline:
            raise OldAttemptRunning(
                f"attempt {ref.attempt} ({ref.job_id}) of this key ended but its processes "
                f"still run after {timeout:g}s; submit again once they stopped (a new attempt "
                "never runs beside them)"
            )
        time.sleep(1.0)


def _created_at(storage: Storage, job_id: str) -> float | None:
    data = read_json(storage, layout.job_file(job_id, layout.HANDLE))
    value = (data or {}).get("created_at")
    return float(value) if isinstance(value, int | float) else None


def next_recorded(storage: Storage, job_id: str) -> str | None:
    """The successor id ``superseded.json`` of ``job_id`` names, or None."""
    record = read_json(storage, layout.job_file(job_id, layout.SUPERSEDED))
    if record is None or record.get("job_id") != job_id:
        return None
    nxt = record.get("successor")
    return nxt if isinstance(nxt, str) else None
