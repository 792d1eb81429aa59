"""How a failed kinetic job or batch is reported: one error type and one readable message."""

from __future__ import annotations

import traceback
from typing import Any

import kinetic_core as kc
from kinetic_airflow.compat import AirflowException

LOG_TAIL_LINES = 50


class KineticJobError(AirflowException):
    """The remote job failed, was cancelled or lost. The message carries the remote
    exception and traceback, the job's reason and the tail of its log."""


def describe_failure(handle: kc.JobHandle, exc: BaseException, log_tail: str | None = None) -> str:
    """One message with the job's status/reason, the remote exception + traceback and the log tail."""
    state: Any = getattr(exc, "state", None)
    if state is None:
        try:
            state = handle.state()
        except Exception:
            state = None
    head = f"Kinetic job {handle.job_id} (attempt {handle.attempt})"
    if state is not None:
        head += f" {state.status.value} (reason: {state.reason or '-'}"
        head += f", exit code {state.exit_code})" if state.exit_code is not None else ")"
        if state.message:
            head += f": {state.message}"
    parts = [head, "".join(traceback.format_exception_only(type(exc), exc)).rstrip()]
    # format_exception_only includes __notes__ (the remote traceback of rebuilt exceptions);
    # RemoteError carries it in its message.
    if log_tail is None:
        log_tail = getattr(exc, "log_tail", None) or safe_tail(handle)
    if log_tail and log_tail.strip():
        parts.append(
            f"--- last {LOG_TAIL_LINES} log lines of {handle.job_id} ---\n{log_tail.rstrip()}"
        )
    return "\n".join(parts)


def safe_tail(handle: kc.JobHandle) -> str:
    """The last ``LOG_TAIL_LINES`` lines of the job's log, or "" when they cannot be read."""
    try:
        return handle.logs(tail=LOG_TAIL_LINES)
    except Exception:
        return ""


def failure_of(job: kc.JobHandle, fallback: BaseException | None = None) -> BaseException:
    """The remote exception of a failed job, or ``fallback`` when it left none."""
    try:
        job.result(timeout=10, cleanup=False)
    except Exception as exc:
        return exc
    if fallback is not None:
        return fallback
    return kc.JobFailed(f"Job {job.job_id} reported as failed")


def describe_batch_failure(exc: kc.BatchError) -> str:
    """The batch summary, each failed child described, unsubmitted inputs and partial results."""
    lines = [f"{exc}"]
    for job in exc.failures:
        lines.append(describe_failure(job, failure_of(job)))
    for index, err in exc.submission_failures.items():
        lines.append(f"input {index}: not submitted: {err}")
    lines.append(f"partial results (None where failed): {exc.partial_results!r}")
    return "\n".join(lines)
