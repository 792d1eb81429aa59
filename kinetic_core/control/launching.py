"""Creating one attempt of a job: call envelope, the create-only ``handle.json``, launch.

Three callers create attempts: ``submit`` (a new call), the batch driver (a call staged
earlier) and recovery (attempt n's call re-bound to attempt n+1). All follow one order,
so a crash at any point leaves nothing half-submitted: the envelope streams to a staging
file; the create-only ``handle.json`` decides the attempt (the lock: with deterministic
ids, racing creators of one attempt find exactly one winner); the backend launches it
(idempotent per job id); ``launched.json`` records that the backend took it, so a job the
backend later does not know was deleted rather than still being submitted. The job's
index entry (``job_index.note_created``) is written just before ``handle.json``, so every
job that exists is listed.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from typing import IO

from kinetic_core.backends import Backend, LaunchSpec, get_backend
from kinetic_core.config.target import Target
from kinetic_core.errors import BackendError, KineticError, SubmissionError
from kinetic_core.records import job_index, layout
from kinetic_core.records.lifecycle import try_write_record
from kinetic_core.storage import Storage

__all__ = ["AttemptTaken", "check_launch", "create_attempt", "launch_spec"]


def may_have_launched(exc: BaseException) -> bool:
    """After ``exc`` from a launch, the backend may have taken the job all the same."""
    return isinstance(exc, BackendError) and exc.transient


class AttemptTaken(KineticError):
    """Another creator made this attempt first: its ``handle.json`` exists."""


def launch_spec(
    job_id: str,
    storage_uri: str,
    target: Target,
    tags: dict[str, str],
    *,
    python_path: list[str] | None = None,
    workdir: str | None = None,
    fuse_volumes: dict[str, str] | None = None,
) -> LaunchSpec:
    """What the backend needs to launch ``job_id``; by default the job imports from this
    process's ``sys.path`` and runs in its working directory (local backend)."""
    return LaunchSpec(
        job_id=job_id,
        storage_uri=storage_uri,
        target=target,
        labels={"kinetic/job-id": job_id, **tags},
        python_path=[p for p in sys.path if p] if python_path is None else python_path,
        workdir=os.getcwd() if workdir is None else workdir,
        fuse_volumes=fuse_volumes or {},
    )


def check_launch(spec: LaunchSpec) -> Backend:
    """The backend of ``spec``, once it said it would launch it: a backend may refuse
    before anything is written (a bad pod spec: ``ConfigError``)."""
    backend = get_backend(spec.target)
    check = getattr(backend, "check_launch", None)
    if check is not None:
        check(spec)
    return backend


def create_attempt(
    storage: Storage,
    spec: LaunchSpec,
    record: bytes,
    *,
    write_payload: Callable[[IO[bytes]], object] | None,
) -> None:
    """Create and launch the attempt ``spec.job_id`` whose ``handle.json`` is ``record``.

    With ``write_payload`` the attempt is new: ``AttemptTaken`` when it exists already
    (nothing of ours is left), and on any other failure what was written is deleted.
    Without, its envelope was staged earlier: ``handle.json`` is created unless a racing
    launcher did, and the launch is idempotent. Failures other than ``KineticError`` are
    raised as ``SubmissionError``. A transient ``BackendError`` from the launch keeps the
    attempt: the request may have reached the backend (its answer lost), so the attempt is
    launched again, never created twice, and observers find the job if it runs.
    """
    job_id = spec.job_id
    backend = check_launch(spec)
    # The local backend marks this process as the job's submitter until the launch is
    # done, so a job whose submitter dies half-way is known dead at once.
    submitting = getattr(backend, "submitting", None)
    created = False
    with contextlib.ExitStack() as marked:
        try:
            if write_payload is not None:
                with storage.open_write(
                    layout.job_file(job_id, layout.PAYLOAD), create_only=True
                ) as fh:
                    write_payload(fh)
                    if submitting:  # after storage proved writable, before the handle
                        marked.enter_context(submitting(job_id))
                    job_index.note_created(storage, record)  # indexed before it exists
                    storage.write_bytes(
                        layout.job_file(job_id, layout.HANDLE), record, create_only=True
                    )
                    created = True  # the staged envelope is published as the block exits
            else:
                if submitting:
                    marked.enter_context(submitting(job_id))
                if not storage.exists(layout.job_file(job_id, layout.HANDLE)):
                    job_index.note_created(storage, record)  # indexed before it exists
                with contextlib.suppress(FileExistsError):  # a racing launcher made it
                    storage.write_bytes(
                        layout.job_file(job_id, layout.HANDLE), record, create_only=True
                    )
            backend.launch(spec)
            try_write_record(storage, job_id, layout.LAUNCHED, backend=backend.name)
        except BaseException as exc:
            if isinstance(exc, FileExistsError) and write_payload is not None and not created:
                raise AttemptTaken(job_id) from None
            if created and not may_have_launched(exc):  # leave nothing half-submitted
                storage.delete_prefix(layout.job_dir(job_id))
                job_index.forget_created(storage, record)
            if isinstance(exc, KineticError) or not isinstance(exc, Exception):
                raise
            raise SubmissionError(
                f"Could not launch job {job_id}: {type(exc).__name__}: {exc}"
            ) from exc
