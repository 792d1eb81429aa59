"""THE status resolution: storage evidence + backend state + deadlines, in one place.

Order of truth: a finished record / result envelope in storage decides SUCCEEDED or
FAILED; a stop marker (cancel, deadline) decides CANCELLED or FAILED; otherwise the
backend's state, checked against ``schedule_timeout`` and ``life_span``; a job the
backend lost without a result is FAILED with reason ``Lost``. Backends are asked in
bulk: one ``poll`` per backend scope for all jobs passed in.
"""

from __future__ import annotations

import json
import socket
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from kinetic_core.backends import Backend, BackendState, get_backend
from kinetic_core.config import Target
from kinetic_core.payload import read_summary
from kinetic_core.storage import Storage, open_storage

# A job whose handle exists but that no backend knows yet is still being submitted.
SUBMIT_GRACE = 120.0
# Backends enforce life_span themselves; this is the fallback after that much extra time.
DEADLINE_GRACE = 30.0
# JobState.message of a succeeded job whose result was delivered (idempotent submit reads it).
RESULT_COLLECTED = "result collected"


class JobStatus(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    NOT_FOUND = "NOT_FOUND"

    @property
    def terminal(self) -> bool:
        return self in (
            JobStatus.SUCCEEDED,
            JobStatus.FAILED,
            JobStatus.CANCELLED,
            JobStatus.NOT_FOUND,
        )


def _dt(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC)


@dataclass(frozen=True)
class JobState:
    """Status plus the evidence behind it. ``reason`` is a short CamelCase word."""

    job_id: str
    status: JobStatus
    reason: str | None = None
    message: str | None = None
    exit_code: int | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    attempt: int = 1

    @property
    def terminal(self) -> bool:
        return self.status.terminal

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        for key in ("created_at", "started_at", "finished_at"):
            data[key] = data[key].isoformat() if data[key] else None
        return data


class JobRef(Protocol):
    """What status resolution needs from a handle."""

    @property
    def job_id(self) -> str: ...
    @property
    def storage(self) -> str: ...
    @property
    def target(self) -> dict[str, Any]: ...
    @property
    def created_at(self) -> float: ...
    @property
    def attempt(self) -> int: ...


@dataclass
class Evidence:
    """What the runner and the client wrote to storage about one job."""

    started: dict[str, Any] | None = None
    finished: dict[str, Any] | None = None
    stop: dict[str, Any] | None = None
    collected: dict[str, Any] | None = None


def _read_json(storage: Storage, key: str) -> dict[str, Any] | None:
    try:
        return json.loads(storage.read_bytes(key))
    except (FileNotFoundError, ValueError):
        return None


def read_evidence(storage: Storage, job_id: str) -> Evidence:
    base = f"jobs/{job_id}"
    ev = Evidence(
        started=_read_json(storage, f"{base}/started.json"),
        finished=_read_json(storage, f"{base}/finished.json"),
        stop=_read_json(storage, f"{base}/stop.json"),
        collected=_read_json(storage, f"{base}/collected.json"),
    )
    if ev.finished is None and storage.exists(f"{base}/result.pkl"):
        # The runner stored a result but died before recording "finished".
        try:
            header = read_summary(storage, f"{base}/result.pkl")
            ev.finished = {"success": bool(header.get("success")), "phase": None}
        except Exception:
            pass
    return ev


def write_stop(storage: Storage, job_id: str, status: JobStatus, reason: str, message: str) -> bool:
    """Record a stop marker once (create-only). Returns False if one already existed."""
    record = {
        "status": status.value,
        "reason": reason,
        "message": message,
        "at": time.time(),
        "host": socket.gethostname(),
    }
    try:
        storage.write_bytes(
            f"jobs/{job_id}/stop.json", json.dumps(record).encode(), create_only=True
        )
    except FileExistsError:
        return False
    return True


def backend_for(ref: JobRef) -> Backend:
    return get_backend(Target.from_dict(ref.target))


def resolve_states(refs: list[Any], *, enforce: bool = True) -> list[JobState]:
    """States of many jobs: one bulk backend poll per scope, storage read only when needed.

    With ``enforce``, jobs past ``schedule_timeout`` or ``life_span`` are stopped here.
    """
    groups: dict[str, list[int]] = defaultdict(list)
    backends: dict[str, Backend] = {}
    scope_of: list[str] = []
    for i, ref in enumerate(refs):
        backend = backend_for(ref)
        backends[backend.scope] = backend
        groups[backend.scope].append(i)
        scope_of.append(backend.scope)
    backend_states: dict[int, BackendState] = {}
    for scope, indexes in groups.items():
        polled = backends[scope].poll([refs[i].job_id for i in indexes])
        for i in indexes:
            backend_states[i] = polled.get(refs[i].job_id, BackendState("not_found"))
    now = time.time()
    return [
        _resolve_one(ref, backend_states[i], backends[scope_of[i]], now, enforce)
        for i, ref in enumerate(refs)
    ]


def _resolve_one(
    ref: JobRef, b: BackendState, backend: Backend, now: float, enforce: bool
) -> JobState:
    storage = open_storage(ref.storage)

    def state(
        status: JobStatus, reason: str | None, message: str | None, ev: Evidence | None = None
    ) -> JobState:
        ev = ev or Evidence()
        started = (ev.started or {}).get("at") or b.started_at
        finished = (ev.finished or {}).get("at") or b.finished_at or (ev.stop or {}).get("at")
        exit_code = b.exit_code if b.exit_code is not None else (ev.finished or {}).get("exit_code")
        return JobState(
            job_id=ref.job_id,
            status=status,
            reason=reason,
            message=message,
            exit_code=exit_code,
            created_at=_dt(ref.created_at),
            started_at=_dt(started),
            finished_at=_dt(finished) if status.terminal else None,
            attempt=ref.attempt,
        )

    target = ref.target
    if b.phase == "pending":
        limit = target.get("schedule_timeout")
        if enforce and limit and now - ref.created_at > limit:
            return _stop(
                storage,
                backend,
                ref,
                state,
                JobStatus.FAILED,
                "ScheduleTimeout",
                f"still pending after schedule_timeout={limit:g}s"
                + (f" ({b.reason}: {b.message})" if b.reason else ""),
            )
        return state(JobStatus.PENDING, b.reason, b.message)
    if b.phase == "running":
        limit = target.get("life_span")
        if enforce and limit and b.started_at and now - b.started_at > limit + DEADLINE_GRACE:
            return _stop(
                storage,
                backend,
                ref,
                state,
                JobStatus.FAILED,
                "DeadlineExceeded",
                f"ran longer than life_span={limit:g}s",
            )
        return state(JobStatus.RUNNING, b.reason, b.message)

    ev = read_evidence(storage, ref.job_id)
    if ev.finished is not None:
        if ev.finished.get("success"):
            msg = RESULT_COLLECTED if ev.collected else None
            return state(JobStatus.SUCCEEDED, None, msg, ev)
        return state(
            JobStatus.FAILED, "Error", ev.finished.get("error") or "the function raised", ev
        )
    if ev.stop is not None:
        return state(
            JobStatus(ev.stop["status"]), ev.stop.get("reason"), ev.stop.get("message"), ev
        )
    if b.phase == "exited":
        reason = b.reason if b.reason not in (None, "Completed") else "Lost"
        message = b.message or f"exited with code {b.exit_code} without storing a result"
        return state(JobStatus.FAILED, reason, message, ev)
    if b.phase == "gone":
        return state(JobStatus.FAILED, "Lost", b.message or "the job vanished without a result", ev)
    # not_found. Young jobs are still being submitted: the runner can even have started
    # before the submitter recorded the launch (a zygote forks in about a millisecond).
    if now - ref.created_at < SUBMIT_GRACE:
        return state(JobStatus.PENDING, "Submitting", "submission in progress", ev)
    return state(
        JobStatus.FAILED,
        "Lost",
        b.message or "the backend has no record of the job and no result was stored",
        ev,
    )


def _stop(
    storage: Storage,
    backend: Backend,
    ref: JobRef,
    state: Any,
    status: JobStatus,
    reason: str,
    message: str,
) -> JobState:
    write_stop(storage, ref.job_id, status, reason, message)
    backend.cancel(ref.job_id)
    return state(status, reason, message)
