"""How a failed job or batch is told to a person: one message with all the evidence.

Used by the CLI and by the orchestrator providers, so a failure reads the same in a
terminal, an Airflow task log and a Prefect run: the job's status and reason, the remote
exception with its traceback, and the tail of the job's log. A multi-host job's failure
names the worker that raised it and shows that worker's log.

To show a failure, ``failure_data`` reads what the runner wrote for viewing (type name,
message, traceback text) and never unpickles: the job wrote its exception, and loading it
runs the job's code. ``failure_of`` loads the exception itself, for a caller that wants to
re-raise it in its own process.
"""

from __future__ import annotations

import re
import traceback
from typing import Any

from kinetic_core.errors import BatchError, JobFailed, RemoteError
from kinetic_core.jobs.handle import JobHandle
from kinetic_core.records.preview import Preview

__all__ = [
    "LOG_TAIL_LINES",
    "describe_batch_failure",
    "describe_failure",
    "exception_text",
    "failed_worker",
    "failure_data",
    "failure_of",
]

LOG_TAIL_LINES = 50


def describe_failure(handle: JobHandle, exc: BaseException, log_tail: str | None = None) -> str:
    """The job's status/reason, the remote exception + traceback and the log tail.

    ``log_tail`` defaults to the one ``exc`` carries, else the last ``LOG_TAIL_LINES``
    lines read now (a log that cannot be read is left out, never an error).
    """
    state: Any = getattr(exc, "state", None)
    if state is None:
        try:
            state = handle.state()
        except Exception:
            state = None
    worker = failed_worker(exc)
    head = f"Kinetic job {handle.job_id} (attempt {handle.attempt})"
    if worker is not None:
        head += f" failed on worker {worker};"
    if state is not None:
        head += f" {state.status.value} (reason: {state.reason or '-'}"
        head += f", exit code {state.exit_code})" if state.exit_code is not None else ")"
        if state.message:
            head += f": {state.message}"
    # format_exception_only includes __notes__ (the remote traceback of rebuilt
    # exceptions); RemoteError carries it in its message.
    parts = [head, exception_text(exc)]
    if log_tail is None:
        log_tail = getattr(exc, "log_tail", None) or _tail(handle, worker)
    if log_tail:  # the runner also logged the remote traceback: show it once
        log_tail = _without_suffix(log_tail.rstrip(), _remote_traceback(exc).rstrip())
    if log_tail and log_tail.strip():
        whose = handle.job_id + (f" worker {worker}" if worker is not None else "")
        parts.append(f"--- last {LOG_TAIL_LINES} log lines of {whose} ---\n{log_tail.rstrip()}")
    return "\n".join(parts)


def failure_of(job: JobHandle, fallback: BaseException | None = None) -> BaseException:
    """The remote exception of a failed job, unpickled here (its result is kept), or
    ``fallback``. Unpickling runs the job's code in this process: to show a failure, use
    ``failure_data``."""
    try:
        job.result(timeout=10, cleanup=False)
    except Exception as exc:
        return exc
    if fallback is not None:
        return fallback
    return JobFailed(f"Job {job.job_id} reported as failed")


def failure_data(job: JobHandle, fallback: BaseException | None = None) -> BaseException:
    """The failure of a failed job as data, never unpickled: a ``RemoteError`` with the
    exception's type name, message and traceback text as the runner wrote them for viewing
    (``JobHandle.preview``). Where there are none (the job wrote no result, an older
    version wrote it), ``fallback``, else a ``JobFailed`` saying what is known."""
    try:
        shown = job.preview()
    except Exception:  # a viewer says what it knows, never fails on missing evidence
        shown = None
    if shown is not None and shown.available and not shown.success:
        return _remote_error(shown)
    if fallback is not None:
        return fallback
    why = f": {shown.note}" if shown is not None and shown.note else ""
    return JobFailed(f"Job {job.job_id} failed{why}")


def _remote_error(shown: Preview) -> RemoteError:
    error = RemoteError(shown.type_name, shown.text, shown.traceback, shown.phase)
    if shown.worker is not None:
        error.kinetic_worker = shown.worker  # type: ignore[attr-defined]
    return error


def describe_batch_failure(exc: BatchError) -> str:
    """The batch summary, each failed child described, unsubmitted inputs and partial
    results (each failure read as data: see ``failure_data``)."""
    lines = [f"{exc}"]
    for job in exc.failures:
        lines.append(describe_failure(job, failure_data(job)))
    for index, err in exc.submission_failures.items():
        lines.append(f"input {index}: not submitted: {err}")
    lines.append(f"partial results (None where failed): {exc.partial_results!r}")
    return "\n".join(lines)


def exception_text(exc: BaseException) -> str:
    """``Type: message`` and the remote traceback; a failure read as data (RemoteError) by
    the remote type's name, not by RemoteError's."""
    if isinstance(exc, RemoteError):
        return str(exc).rstrip()
    return "".join(traceback.format_exception_only(type(exc), exc)).rstrip()


def _remote_traceback(exc: BaseException) -> str:
    if isinstance(exc, RemoteError):
        return exc.remote_traceback
    notes = [n for n in getattr(exc, "__notes__", ()) if n.startswith("Remote traceback")]
    return notes[-1].partition(":\n")[2] if notes else ""


def _without_suffix(text: str, suffix: str) -> str:
    return text[: -len(suffix)] if suffix and text.endswith(suffix) else text


#: The note the runner adds to a multi-host job's failure (``runner.WORKER_NOTE``), and the
#: lead of its message when the exception travels as a RemoteError.
_WORKER_NOTE = re.compile(r"^kinetic: raised on worker (\d+)$")
_WORKER_LEAD = re.compile(r"^worker (\d+): ")


def failed_worker(exc: BaseException) -> int | None:
    """The worker of a multi-host job that raised ``exc`` (None: a single-host job's)."""
    index = getattr(exc, "kinetic_worker", None)
    if isinstance(index, int):
        return index
    for note in getattr(exc, "__notes__", ()):
        match = _WORKER_NOTE.match(str(note))
        if match:
            return int(match.group(1))
    if isinstance(exc, RemoteError):
        match = _WORKER_LEAD.match(exc.remote_message)
        return int(match.group(1)) if match else None
    return None


def _tail(handle: JobHandle, worker: int | None = None) -> str:
    try:
        return handle.logs(tail=LOG_TAIL_LINES, worker=worker)
    except Exception:
        return ""
