"""State history: every observed transition of a job, kept in storage.

Object stores cannot append, so each transition is its own create-only record,
``jobs/{id}/history/{STATUS}-{Reason}.json``, written by whichever process first observes
it during status resolution (ten observers of one transition write it once). A process
remembers what it has written, so a steady state costs no storage call per poll. The
terminal entry is the job's ``outcome.json`` (written once anyway), read back here, and a job that ran
between two polls shows its start from the runner's ``started.json``.

Hooks (see ``hooks``) hang on the same create-only writes: ``history/hook-{event}.json``
(``started``, ``succeeded``, ``failed``, ``cancelled``) is created by the first observer of
that event, and only that process fires it: once per transition however many observe.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import threading
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from kinetic_core.config import hooks
from kinetic_core.errors import StorageError
from kinetic_core.records import layout
from kinetic_core.records.lifecycle import read_json, read_outcome
from kinetic_core.states import JobState, JobStatus, timestamp
from kinetic_core.storage import Storage

log = logging.getLogger(__name__)

# Transitions this process has recorded (or found recorded): (storage, job, entry name).
_SEEN_MAX = 50_000
_seen: OrderedDict[tuple[str, str, str], None] = OrderedDict()
_lock = threading.Lock()
# Markers in the history folder that say a transition's hooks were fired (not transitions).
HOOK_PREFIX = "hook-"


@dataclass(frozen=True)
class Transition:
    """One observed state of one attempt, from ``at`` until the next transition."""

    job_id: str
    attempt: int
    status: JobStatus
    reason: str | None
    message: str | None
    exit_code: int | None
    at: datetime | None
    #: Seconds until the next transition (None for the last one).
    duration: float | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        data["at"] = self.at.isoformat() if self.at else None
        return data


@functools.lru_cache(maxsize=1024)
def entry_name(status: JobStatus, reason: str | None) -> str:
    """``RUNNING-none``, ``PENDING-Unschedulable``: safe as a path segment whatever the
    backend's reason says."""
    word = re.sub(r"[^A-Za-z0-9]", "", reason or "")[:48] or "none"
    return f"{status.value}-{word}"


def _remember(key: tuple[str, str, str]) -> bool:
    """True if ``key`` is new to this process (and remember it)."""
    with _lock:
        if key in _seen:
            _seen.move_to_end(key)
            return False
        _seen[key] = None
        if len(_seen) > _SEEN_MAX:
            _seen.popitem(last=False)
        return True


def note(storage: Storage, state: JobState, job: Any = None) -> None:
    """Record ``state`` if it is a transition nobody recorded yet (terminal states are
    recorded by the outcome itself), and fire its hooks once across all observers (``job``:
    the handle ``state`` is of). Best effort: read-only storage only logs."""
    if not state.terminal:
        _record(storage, state)
    if job is not None and (events := hook_events(state)) and hooks.active():
        for event in events:
            if _claim(storage, state, event):
                hooks.fire(f"on_job_{event}", hooks.public(job))


def _record(storage: Storage, state: JobState) -> None:
    name = entry_name(state.status, state.reason)
    if not _remember((storage.uri, state.job_id, name)):
        return
    at = state.started_at if state.status is JobStatus.RUNNING and state.started_at else None
    record = {
        "job_id": state.job_id,
        "attempt": state.attempt,
        "status": state.status.value,
        "reason": state.reason,
        "message": state.message,
        "exit_code": state.exit_code,
        "at": at.timestamp() if at else time.time(),
    }
    _create(storage, state.job_id, name, record)


def _create(storage: Storage, job_id: str, name: str, record: dict[str, Any]) -> bool:
    """Create history entry ``name``; False if it exists (another observer was first) or
    cannot be written."""
    try:
        storage.write_bytes(
            layout.history_entry(job_id, name), json.dumps(record).encode(), create_only=True
        )
    except FileExistsError:
        return False
    except (StorageError, OSError) as exc:
        log.info("kinetic: cannot record the history of %s: %s", job_id, exc)
        return False
    return True


def hook_events(state: JobState) -> list[str]:
    """The hook events ``state`` may imply, in order: ``started`` (a terminal state: if
    it ran, see ``_claim``), then its end."""
    if state.status is JobStatus.RUNNING:
        return ["started"]
    return ["started", state.status.value.lower()] if state.terminal else []


def _claim(storage: Storage, state: JobState, event: str) -> bool:
    """Create ``history/hook-{event}.json`` once for all observers: True for the one
    process whose create-only write won, which then fires the hook. At-most-once: a
    process killed right after its write fires nothing, and nobody else will. A job seen
    ended without being seen running fires ``started`` if its runner recorded a start
    (the job ran between two polls)."""
    name = f"{HOOK_PREFIX}{event}"
    key = (storage.uri, state.job_id, name)
    if not _remember(key):
        return False
    if event == "started" and state.terminal:
        started = read_json(storage, layout.job_file(state.job_id, layout.STARTED))
        if started is None or started.get("job_id") != state.job_id:
            return False  # it never ran (an ended job does not start later)
    record = {"job_id": state.job_id, "event": event, "at": time.time(), "pid": os.getpid()}
    return _create(storage, state.job_id, name, record)


def transitions(storage: Storage, job_id: str, attempt: int = 1) -> list[Transition]:
    """The recorded transitions of one attempt, oldest first, with durations."""
    records = []
    for name in storage.list_names(layout.history_dir(job_id)):
        if name.endswith(".json") and not name.startswith(HOOK_PREFIX):
            data = read_json(storage, layout.history_entry(job_id, name[: -len(".json")]))
            if data is not None and data.get("job_id") == job_id:
                records.append(data)
    started = read_json(storage, layout.job_file(job_id, layout.STARTED))
    if started is not None and not any(r.get("status") == "RUNNING" for r in records):
        # Started and ended between two polls: the runner's own record says when it ran.
        records.append({**started, "status": JobStatus.RUNNING.value})
    outcome = read_outcome(storage, job_id)
    if outcome is not None:
        records.append(outcome)
    ordered = _in_order(records)
    found: list[Transition] = []
    for i, (r, status, at) in enumerate(ordered):
        nxt = ordered[i + 1][2] if i + 1 < len(ordered) else None
        found.append(
            Transition(
                job_id=job_id,
                attempt=int(r.get("attempt") or attempt),
                status=status,
                reason=r.get("reason"),
                message=r.get("message"),
                exit_code=r.get("exit_code"),
                at=timestamp(at),
                duration=nxt - at if nxt is not None and at is not None else None,
            )
        )
    return found


def _rank(status: JobStatus) -> int:
    """A job moves PENDING -> RUNNING -> a terminal status, never back."""
    return 2 if status.terminal else {JobStatus.PENDING: 0, JobStatus.RUNNING: 1}.get(status, 0)


def _in_order(
    records: list[dict[str, Any]],
) -> list[tuple[dict[str, Any], JobStatus, float | None]]:
    """Records in the state machine's order, times made monotone: sources date them with
    other clocks and precisions (a pod's ``startedAt`` in whole seconds, an observer's
    clock), so a RUNNING can carry an earlier time than the PENDING seen before it. A
    time earlier than its predecessor's is raised to it."""
    parsed = []
    for r in records:
        try:
            status = JobStatus(r["status"])
        except (KeyError, ValueError):
            continue
        at = r.get("at")
        parsed.append((r, status, float(at) if isinstance(at, int | float) else None))
    parsed.sort(key=lambda p: (_rank(p[1]), p[2] if p[2] is not None else 0.0))
    out: list[tuple[dict[str, Any], JobStatus, float | None]] = []
    latest: float | None = None
    for r, status, at in parsed:
        if at is not None:
            at = at if latest is None else max(at, latest)
            latest = at
        out.append((r, status, at))
    return out
