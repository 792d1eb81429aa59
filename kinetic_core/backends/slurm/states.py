"""A Slurm job's record (one entry of ``squeue --json``) as a BackendState (pure).

Slurm keeps an ended job's record for ``MinJobAge`` (300 s by default); a job in
``COMPLETING`` still has processes on its nodes, so it reads running: a successor attempt
starts only once every task of this one is gone.
"""

from __future__ import annotations

import signal
from typing import Any

from kinetic_core.backends import BackendState
from kinetic_core.states import Reason

LIVE = frozenset(
    {
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "STOPPED",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "POWER_UP_NODE",
        "UPDATE_DB",
    }
)
WAITING = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
# An ended job's Slurm state -> (reason, what happened).
ENDED: dict[str, tuple[str, str]] = {
    "COMPLETED": (Reason.COMPLETED, "the batch script exited"),
    "FAILED": (Reason.ERROR, "the batch script exited non-zero"),
    # kinetic's own cancel decides the outcome before its scancel: a CANCELLED job seen
    # undecided was stopped from outside, on purpose; it is not recovered.
    "CANCELLED": (
        Reason.CANCELLED,
        "cancelled outside kinetic (scancel by a user or an admin); a job stopped on "
        "purpose is not recovered",
    ),
    "TIMEOUT": (Reason.DEADLINE_EXCEEDED, "Slurm's time limit (life_span + grace) passed"),
    "PREEMPTED": (Reason.PREEMPTED, "preempted by a job of a higher-priority partition"),
    "NODE_FAIL": (Reason.LOST, "a node of the job failed (Slurm NODE_FAIL)"),
    "BOOT_FAIL": (Reason.LOST, "a node of the job failed to boot (Slurm BOOT_FAIL)"),
    "OUT_OF_MEMORY": (Reason.OOM_KILLED, "a process exceeded the job's memory (--mem)"),
    "DEADLINE": (Reason.DEADLINE_EXCEEDED, "Slurm's --deadline passed"),
    "REVOKED": (Reason.LOST, "the job was revoked (federation)"),
    "SPECIAL_EXIT": (Reason.ERROR, "the job ended with Slurm's special exit state"),
}
#: Words Slurm gives a pending job that say nothing: no reason to show.
NO_REASON = frozenset({"", "None"})


def _when(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and value > 0 else None


def exit_code_of(raw: Any) -> int | None:
    """Slurm's exit_code is a wait status: code << 8, or the signal; 128 + signal as a shell."""
    if not isinstance(raw, int):
        return None
    return raw >> 8 if raw & 0x7F == 0 else 128 + (raw & 0x7F)


def job_state(record: dict[str, Any]) -> BackendState:
    """The BackendState of one squeue record."""
    state = str(record.get("job_state") or "").split(",")[0].upper()
    slurm_reason = str(record.get("state_reason") or "")
    detail = str(record.get("state_description") or "")
    started, ended = _when(record.get("start_time")), _when(record.get("end_time"))
    where = f"Slurm job {record.get('job_id')}"
    if state in WAITING:
        reason = None if slurm_reason in NO_REASON else slurm_reason
        return BackendState(
            "pending",
            reason=reason,
            message=f"{where} is {state.lower()}"
            + (f": {reason}" if reason else "")
            + (f" ({detail})" if detail else ""),
        )
    if state in LIVE:
        ending = " (ending: its processes are stopping)" if state == "COMPLETING" else ""
        return BackendState(
            "running", started_at=started, message=f"{where} is {state.lower()}{ending}"
        )
    reason, what = ENDED.get(state, (Reason.ERROR, f"Slurm state {state}"))
    code = exit_code_of(record.get("exit_code"))
    if state == "FAILED" and code is not None and code > 128:
        sig = code - 128
        reason = Reason.KILLED if sig == signal.SIGKILL else Reason.SIGNALED
    nodes = record.get("nodes") or ""
    return BackendState(
        "exited",
        exit_code=code,
        reason=reason,
        message=f"{where}: {what}"
        + (f" (nodes {nodes})" if nodes else "")
        + (f"; {detail}" if detail else ""),
        started_at=started,
        finished_at=ended,
        ran=False if state == "BOOT_FAIL" or (started is None and state != "COMPLETED") else None,
    )
