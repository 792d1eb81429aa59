"""The status vocabulary: JobStatus, Reason, JobState and a batch child's ChildStatus.

Plain data, no I/O. Providers and the CLI ask these types (``.terminal``, ``.collected``,
``.recoverable``, ``.ran``) instead of re-spelling sets of status strings or matching
messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol


class Reason(StrEnum):
    """Every reason word kinetic itself gives a job (``JobState.reason``) or a backend's
    state. A member is a ``str`` equal to its word, so stored records and comparisons with
    plain strings are unchanged; a backend may still pass on words of its own (a pod's
    waiting reason), and a word read from storage that is no member stays a plain str
    (``Reason.of``)."""

    # -- waiting
    SUBMITTING = "Submitting"  # the handle exists, no backend has the job yet (launching)
    QUEUED = "Queued"  # waiting for its queue's admission (Kueue)
    UNSCHEDULABLE = "Unschedulable"  # no node can take the pod (yet)
    IMAGE_PULL_BACK_OFF = "ImagePullBackOff"  # the runner image cannot be pulled
    SECRET_MISSING = "SecretMissing"  # the job's signing-key Secret was deleted: no pod starts
    RECOVERING = "Recovering"  # ended recoverably; the next attempt waits for its processes
    # -- running, with trouble
    NODE_UNREACHABLE = "NodeUnreachable"  # the pod's node stopped reporting (within lost_grace)
    JOB_DELETED = "JobDeleted"  # the Kubernetes Job was deleted while its pod still runs
    TERMINATING = "Terminating"  # the pod is being deleted; its process may still save its work
    # -- ended
    COMPLETED = "Completed"  # a backend's clean exit (code 0); the job's outcome is in storage
    ERROR = "Error"  # the function raised, or the process exited non-zero
    IMAGE_MISMATCH = "ImageMismatch"  # runner and submitter versions differ (errors.ImageMismatch)
    REQUIREMENTS_FAILED = "RequirementsFailed"  # Target(requirements=...) failed to install
    OOM_KILLED = "OOMKilled"  # the container exceeded its memory limit
    KILLED = "Killed"  # the local runner was killed by SIGKILL
    SIGNALED = "Signaled"  # the local runner was killed by another signal
    PREEMPTED = "Preempted"  # stopped from outside: a spot reclaim, node shutdown, eviction
    NODE_LOST = "NodeLost"  # the node stayed unreachable past lost_grace (the job reads Lost)
    LOST = "Lost"  # no process of the job is left and no result was stored
    ABORTED = "Aborted"  # the local supervisor was never confirmed by its submitter: never ran
    CANCELLED = "Cancelled"  # cancel() was called
    DEADLINE_EXCEEDED = "DeadlineExceeded"  # ran longer than life_span
    SCHEDULE_TIMEOUT = "ScheduleTimeout"  # pending longer than schedule_timeout
    QUEUE_TIMEOUT = "QueueTimeout"  # queued longer than queue_timeout
    OUTPUTS_NOT_SYNCED = "OutputsNotSynced"  # the function returned; its outputs' final sync failed

    @property
    def recoverable(self) -> bool:
        """A recovery may follow a FAILED end for this reason (budget permitting); an exit
        code in ``recover_on_exit_codes`` is the other way in (``control.recovery``)."""
        return self in (Reason.PREEMPTED, Reason.LOST)

    @classmethod
    def of(cls, word: str | None) -> Reason | str | None:
        """The member for ``word``; a word this version does not know (a backend's own,
        or one a newer version stored) stays the plain str it was."""
        if word is None:
            return None
        return _BY_WORD.get(word, word)  # a dict read: resolution asks it per job per poll


_BY_WORD: dict[str, Reason] = {r.value: r for r in Reason}


def recoverable_reason(word: str | None) -> bool:
    """``Reason(word).recoverable``, False for None and for words that are no member."""
    reason = Reason.of(word)
    return isinstance(reason, Reason) and reason.recoverable


#: Reason of a job whose handle exists but that no backend has yet: its launch is under way
#: (or its submitter died before it; an idempotent resubmit launches it again).
SUBMITTING = Reason.SUBMITTING
#: Reason of a job whose attempt ended recoverably while its processes still stop: the next
#: attempt starts once they are gone.
RECOVERING = Reason.RECOVERING

#: Exit code of a runner that will not run the job's function: another process of the job
#: ran it or may still run it (a replacement pod, an attempt superseded or not yet due). A
#: backend never reads such a process as the job's end while another process of it lives.
REFUSED_EXIT_CODE = 117


class JobRef(Protocol):
    """What observing a job needs of its handle (``JobHandle`` is one): the one type the
    status resolution, recovery and every wait take, so a renamed field is a type error."""

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
    @property
    def idempotency_key(self) -> str | None: ...
    @property
    def tags(self) -> dict[str, str]: ...
    @property
    def recoveries(self) -> int: ...
    @property
    def lost_seconds(self) -> float: ...
    @property
    def signing_key(self) -> str | None: ...
    def record(self) -> bytes:
        """The handle as stored (``handle.json``)."""
        ...


class JobStatus(StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    NOT_FOUND = "NOT_FOUND"

    @property
    def terminal(self) -> bool:
        return self not in (JobStatus.PENDING, JobStatus.RUNNING)


class ChildStatus(StrEnum):
    """Status of one input of a batch: its job's status, or why it has no job."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    NOT_FOUND = "NOT_FOUND"
    SUBMIT_FAILED = "SUBMIT_FAILED"  # submission raised (or the submitter stopped for good)
    UNSUBMITTED = "UNSUBMITTED"  # not submitted yet

    @property
    def terminal(self) -> bool:
        return self not in (ChildStatus.PENDING, ChildStatus.RUNNING, ChildStatus.UNSUBMITTED)

    @property
    def ok(self) -> bool:
        return self is ChildStatus.SUCCEEDED

    @classmethod
    def of(cls, status: JobStatus) -> ChildStatus:
        return cls(status.value)


def timestamp(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC)


@dataclass(frozen=True)
class JobState:
    """Status plus the evidence behind it. ``reason`` is a short CamelCase word.

    ``collected``: a SUCCEEDED job's result was delivered (an idempotent submit with its
    key then starts a new attempt, unless told to reuse succeeded jobs).
    ``recoveries``: how many times a recoverable end (a preemption, a lost job, an exit
    code listed in ``recover_on_exit_codes``) restarted the job before this attempt;
    ``lost_seconds``: the running time of those ended attempts (work lost, at most).
    ``ran``: whether this attempt's runner started: True once it recorded its start;
    False when it is known it never did (its launch was abandoned before the runner was
    let go, or the backend has no record of a job that recorded no start); None when not
    known (a job not yet ended, an end no evidence speaks to, or one an older version
    recorded).
    """

    job_id: str
    status: JobStatus
    reason: str | None = None
    message: str | None = None
    exit_code: int | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    attempt: int = 1
    collected: bool = False
    recoveries: int = 0
    lost_seconds: float = 0.0
    ran: bool | None = None

    @property
    def value(self) -> str:
        """Deprecated: the status word. kinetic's ``on_status_change`` callbacks got a
        ``JobStatus`` and read ``s.value``; here they get a JobState, whose status word is
        ``state.status.value``."""
        import warnings  # only a seed-era callback gets here

        warnings.warn(
            "JobState.value is the kinetic spelling (on_status_change got a JobStatus "
            "there): use state.status.value (the old name will be removed).",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.status.value

    @property
    def terminal(self) -> bool:
        return self.status.terminal

    @property
    def recovery_note(self) -> str:
        """'' for a job never recovered; else how often and how much work was lost, in
        words (for the CLI, task logs and artifacts)."""
        if not self.recoveries:
            return ""
        return (
            f"recovered {self.recoveries}x, now attempt {self.attempt}; "
            f"up to {self.lost_seconds:.0f}s of work lost"
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (a reason is its word, a time ISO 8601); ``from_dict``
        reads it back."""
        data = asdict(self)
        data["status"] = self.status.value
        data["reason"] = None if self.reason is None else str(self.reason)
        for key in _TIMES:
            data[key] = data[key].isoformat() if data[key] else None
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobState:
        """The state ``to_dict`` gave, from this version or another: keys it does not
        know are ignored, missing ones take their defaults (``ran`` None: not known)."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["status"] = JobStatus(values["status"])
        values["reason"] = Reason.of(values.get("reason"))
        for key in _TIMES:
            if values.get(key):
                values[key] = datetime.fromisoformat(values[key])
        return cls(**values)


_TIMES = ("created_at", "started_at", "finished_at")
