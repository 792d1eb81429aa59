"""The status vocabulary: JobStatus, JobState and a batch child's ChildStatus.

Plain data, no I/O. Providers and the CLI ask these types (``.terminal``, ``.collected``)
instead of re-spelling sets of status strings.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

#: Reason of a job whose handle exists but that no backend has yet: its launch is under way
#: (or its submitter died before it; an idempotent resubmit launches it again).
SUBMITTING = "Submitting"
#: Reason of a job whose attempt ended recoverably while its processes still stop: the next
#: attempt starts once they are gone.
RECOVERING = "Recovering"

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
        data = asdict(self)
        data["status"] = self.status.value
        for key in ("created_at", "started_at", "finished_at"):
            data[key] = data[key].isoformat() if data[key] else None
        return data
