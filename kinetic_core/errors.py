"""Typed errors. Every message says what was wrong and what to do about it."""

from __future__ import annotations

TYPE_CHECKING = False  # no `typing` at run time: a job's start path (runner.py)
if TYPE_CHECKING:
    from typing import Any


# This module is the bottom layer: it imports nothing from kinetic_core, so every other
# module can raise these. Fields that hold a JobState or JobHandle are typed ``Any``.


class KineticError(Exception):
    """Base of every error kinetic raises on purpose."""


class ConfigError(KineticError, ValueError):
    """A Target, environment variable or argument is invalid."""


class PermissionDenied(ConfigError):
    """The backend refused an action for lack of a permission (a Kubernetes RBAC 403): the
    credentials are valid, a Role lacks a verb. ``verb``, ``resource``, ``namespace`` and
    ``user`` say which (empty when the server did not say); nothing was changed."""

    def __init__(
        self,
        message: str,
        *,
        verb: str = "",
        resource: str = "",
        namespace: str = "",
        user: str = "",
    ) -> None:
        super().__init__(message)
        self.verb = verb
        self.resource = resource
        self.namespace = namespace
        self.user = user

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _permission_denied,
            (str(self), self.verb, self.resource, self.namespace, self.user),
        )


def _permission_denied(
    message: str, verb: str, resource: str, namespace: str, user: str
) -> PermissionDenied:
    return PermissionDenied(message, verb=verb, resource=resource, namespace=namespace, user=user)


class InvalidIdError(ConfigError):
    """A job or group id that is not safe to use as a path or resource name."""


class SubmissionError(KineticError):
    """A job could not be submitted; nothing was left behind."""


class SubmissionRefused(SubmissionError):
    """A hook's ``on_job_submitting`` refused the submission (returned False or raised);
    ``hook`` names it and the message says why. Nothing was written."""

    def __init__(self, message: str, *, hook: str = "") -> None:
        super().__init__(message)
        self.hook = hook

    def __reduce__(self) -> tuple[Any, ...]:
        return (_submission_refused, (str(self), self.hook))


def _submission_refused(message: str, hook: str) -> SubmissionRefused:
    return SubmissionRefused(message, hook=hook)


class IdempotencyConflict(SubmissionError):
    """A keyed submit of another call (another function, or other arguments) than the job
    its idempotency key already has in flight or uncollected. ``job_id`` names that job;
    nothing was written. Use another key, wait for the job, or pass ``reattach_any=True``
    to get that job whatever it runs."""

    def __init__(self, message: str, *, job_id: str = "") -> None:
        super().__init__(message)
        self.job_id = job_id

    def __reduce__(self) -> tuple[Any, ...]:
        return (_idempotency_conflict, (str(self), self.job_id))


def _idempotency_conflict(message: str, job_id: str) -> IdempotencyConflict:
    return IdempotencyConflict(message, job_id=job_id)


class SerializationError(SubmissionError):
    """The function or its arguments cannot be pickled."""


class StorageError(KineticError):
    """The storage root cannot be read or written (missing bucket, permissions...)."""


class OutputsNotSynced(StorageError):
    """The job's function returned, but the final sync of its output folder to its
    ``output_dir`` failed (credentials, a missing bucket, a full disk): the job reads FAILED
    (reason ``OutputsNotSynced``) so nothing downstream takes it for a success. The message
    names the error and the folder on the job's machine where the files were kept."""

    reason = "OutputsNotSynced"


class BackendError(KineticError):
    """The backend (e.g. the Kubernetes API) failed to answer. The job itself may be fine:
    observing or waiting again is safe."""

    def __init__(self, message: str, *, status: int | None = None, transient: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.transient = transient


class JobNotRunning(KineticError):
    """The job has no running process to reach (port-forward): it is still pending, or it
    has ended. The message says which."""


class JobStillRunning(KineticError):
    """``cleanup()`` of a job that has not ended: it would cancel the job. Nothing was
    done; pass ``cancel=True`` (``kinetic jobs cleanup --cancel``) to cancel it and clean
    up, or wait for it to end."""


class JobNotFound(KineticError, LookupError):
    """No job with that id exists under the storage root."""


class CorruptRecord(JobNotFound, StorageError):
    """A stored record (e.g. ``handle.json``) is unreadable, forged, or belongs to another
    job or storage: it is not acted on. ``path`` names the file; the message says what to do."""

    def __init__(self, message: str, *, job_id: str = "", path: str = "") -> None:
        super().__init__(message)
        self.job_id = job_id
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (_corrupt_record, (str(self), self.job_id, self.path))


def _corrupt_record(message: str, job_id: str, path: str) -> CorruptRecord:
    return CorruptRecord(message, job_id=job_id, path=path)


class JobSetupError(KineticError):
    """The job's environment could not run it, so its function never started; ``reason``
    is the job's reason (the message says what to change)."""

    reason = "Error"  # each a word of states.Reason, spelled here: this module imports nothing


class ImageMismatch(JobSetupError):
    """The runner's Python minor, cloudpickle or kinetic-workflows version differs from the
    submitter's: rebuild the runner image with the submitter's versions, or install the
    packages at pod start with ``Target(requirements=[...])``."""

    reason = "ImageMismatch"


class RequirementsFailed(JobSetupError):
    """``Target(requirements=[...])`` could not be installed at pod start (the job's log has
    the installer's output): fix the requirement or the package index it reaches."""

    reason = "RequirementsFailed"


class PayloadIntegrityError(KineticError):
    """An envelope failed its checksum or signature check; it was not unpickled."""


class PayloadFormatUnsupported(PayloadIntegrityError):
    """An envelope's format needs an optional package this environment lacks (format 3:
    ``blake3``, the ``fast`` extra); it could not be checked, so it was not unpickled."""


class WaitTimeout(KineticError, TimeoutError):
    """Waiting timed out. The job keeps running and its handle stays valid."""


class JobCancelled(KineticError):
    """The job was cancelled, so it has no result."""


class JobFailed(KineticError):
    """The job ended without a result (lost, killed, deadline...): see ``state`` and ``log_tail``."""

    def __init__(self, message: str, *, state: Any = None, log_tail: str = "") -> None:
        super().__init__(message)
        self.state = state
        self.log_tail = log_tail


class SignalRefused(KineticError, ValueError):
    """``send_signal`` refused: the signal would stop or kill the job (SIGTERM: use
    ``cancel()``), or the job is not running (ended, or not started yet). Nothing was
    written; the message says what to do instead."""


class ResultNotAvailable(KineticError):
    """The result was already collected and cleaned up."""


class RemoteError(KineticError):
    """A remote exception that could not be rebuilt here (unpicklable or not importable)."""

    def __init__(
        self, type_name: str, message: str, traceback: str = "", phase: str = "run"
    ) -> None:
        super().__init__(
            f"{type_name}: {message}" + (f"\n\nRemote traceback:\n{traceback}" if traceback else "")
        )
        self.type_name = type_name
        self.remote_message = message
        self.remote_traceback = traceback
        self.phase = phase

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            RemoteError,
            (self.type_name, self.remote_message, self.remote_traceback, self.phase),
        )


class BatchError(KineticError):
    """Some children of a batch failed. Carries what succeeded so no work is lost."""

    def __init__(
        self,
        group_id: str,
        failures: list[Any],
        partial_results: list[Any],
        submission_failures: dict[int, BaseException] | None = None,
        total: int | None = None,
        reports: dict[int, str] | None = None,
        counts: dict[str, int] | None = None,
    ) -> None:
        #: Per failed input (the first few): its remote exception, traceback and log tail.
        self.reports = dict(reports or {})
        self.group_id = group_id
        self.failures = failures
        self.partial_results = partial_results
        self.submission_failures = dict(submission_failures or {})
        self.total = total if total is not None else len(partial_results)
        #: What happened to the inputs that gave no value, by what: ``failed``,
        #: ``cancelled``, ``not launched``, ``not submitted``, ``already collected``.
        self.counts = dict(counts or {"failed": len(failures) + len(self.submission_failures)})
        super().__init__(f"Batch {group_id}: {_batch_summary(self.counts, self.total)}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            BatchError,
            (
                self.group_id,
                self.failures,
                self.partial_results,
                self.submission_failures,
                self.total,
                self.reports,
                self.counts,
            ),
        )


def _batch_summary(counts: dict[str, int], total: int) -> str:
    """ "2 of 5 jobs failed" when every input without a value failed; else what happened
    to each: "20 of 20 inputs gave no value: 1 failed, 12 cancelled, 7 not launched"."""
    happened = {word: n for word, n in counts.items() if n}
    if set(happened) <= {"failed"}:
        return f"{happened.get('failed', 0)} of {total} jobs failed"
    what = ", ".join(f"{n} {word}" for word, n in happened.items())
    return f"{sum(happened.values())} of {total} inputs gave no value: {what}"
