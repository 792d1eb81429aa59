"""Submission and idempotency: ``submit`` turns a call into exactly one job per attempt.

A job is created in a fixed order so that a crash at any point leaves nothing half
submitted: the call envelope streams to staging, the create-only ``handle.json`` decides
the attempt (the lock), the envelope is published, then the backend launches the job.
With an idempotency key, attempt ids are deterministic (``keyed_id``), so concurrent
submitters of one key race for the same ``handle.json`` and exactly one wins.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from tenacity import retry, retry_if_exception_type, stop_after_attempt

from kinetic_core import layout
from kinetic_core.backends import LaunchSpec, get_backend
from kinetic_core.config import Target, validate_tags
from kinetic_core.data import Data, check_volumes, fuse_volumes
from kinetic_core.data import prepare as prepare_data
from kinetic_core.errors import ConfigError, JobNotFound, KineticError, SubmissionError
from kinetic_core.ids import keyed_id, new_id
from kinetic_core.jobs import JobHandle, load_handle
from kinetic_core.payload import dump_envelope
from kinetic_core.polling import in_thread
from kinetic_core.states import JobStatus
from kinetic_core.storage import Storage, open_storage

__all__ = ["asubmit", "submit"]


class _Raced(Exception):
    """Another submitter created this attempt first."""


def _check_call(fn: Any, args: Any, kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    if not callable(fn):
        raise SubmissionError(f"Expected a callable to run, got {type(fn).__name__}: {fn!r}.")
    if not isinstance(args, tuple | list):
        raise SubmissionError(f"args must be a tuple or list, got {type(args).__name__}.")
    kwargs = {} if kwargs is None else kwargs
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise SubmissionError(f"kwargs must be a dict with str keys, got {kwargs!r}.")
    return tuple(args), dict(kwargs)


def _by_value_modules(fn: Any, target: Target) -> list[str]:
    """Modules to ship by value: the user's list plus the function's module when the
    remote side could not import it by name (e.g. Airflow DAG files, which Airflow
    imports under generated module names)."""
    modules = list(target.pickle_by_value or [])
    name = getattr(fn, "__module__", None)
    module = sys.modules.get(name or "")
    if (
        name
        and name != "__main__"
        and module is not None
        and name not in modules
        and not _importable_by_name(name, module)
    ):
        modules.append(name)
    return modules


def _importable_by_name(name: str, module: Any) -> bool:
    """Would ``import name`` on sys.path find this very module? (ignores sys.modules)."""
    file = getattr(module, "__file__", None)
    if file is None:
        return True  # builtin or frozen: importable everywhere
    parent, _, leaf = name.rpartition(".")
    path = sys.path if not parent else getattr(sys.modules.get(parent), "__path__", None)
    try:
        spec = importlib.machinery.PathFinder.find_spec(leaf, path)
    except (ImportError, ValueError):
        spec = None
    return spec is not None and os.path.realpath(spec.origin or "") == os.path.realpath(file)


def submit(
    fn: Callable[..., Any],
    args: tuple[Any, ...] | list[Any] = (),
    kwargs: dict[str, Any] | None = None,
    *,
    target: Target | dict[str, Any] | None = None,
    idempotency_key: str | None = None,
    name: str | None = None,
    tags: dict[str, str] | None = None,
    reuse_succeeded: bool = False,
    volumes: dict[str, Data] | None = None,
) -> JobHandle:
    """Submit ``fn(*args, **kwargs)`` as a detached job and return its handle at once.

    With ``idempotency_key``: if the key's latest attempt is in flight, or succeeded and
    was not collected, that job's handle is returned instead of a new job; concurrent
    submitters with one key create exactly one job. ``reuse_succeeded=True`` also reuses
    a succeeded attempt whose result was already collected (keep it with
    ``result(cleanup=False)``), e.g. so a whole-pipeline retry does not rerun it.

    Every ``Data`` in the arguments arrives in the job as a local path; ``volumes`` maps
    absolute paths in the job to ``Data`` (Kubernetes backends; see docs/data.md).
    """
    args, kwargs = _check_call(fn, args, kwargs)
    resolved = Target.coerce(target).resolve()
    all_tags = {**(resolved.tags or {}), **validate_tags(tags or {})}
    job_name = name or getattr(fn, "__qualname__", None) or type(fn).__name__
    missing = [n for n in (resolved.env or []) if n not in os.environ]
    if missing:
        raise ConfigError(f"Target.env names {missing}, which are not set in this environment.")
    call = {
        "fn": fn,
        "args": args,
        "kwargs": kwargs,
        "env": {n: os.environ[n] for n in resolved.env or []},
    }
    mounts = check_volumes(volumes, str(resolved.backend))
    call = prepare_data(call, mounts, open_storage(resolved.storage or ""))
    plan = _Submission(resolved, call, _by_value_modules(fn, resolved), job_name, all_tags)
    if idempotency_key is None:
        return plan.create(new_id(job_name), attempt=1, key=None)
    if not isinstance(idempotency_key, str) or not idempotency_key:
        raise ConfigError("idempotency_key must be a non-empty string.")
    return plan.submit_keyed(idempotency_key, reuse_succeeded)


@dataclass
class _Submission:
    target: Target
    call: dict[str, Any]
    by_value: list[str]
    name: str
    tags: dict[str, str]

    @property
    def storage(self) -> Storage:
        return open_storage(self.target.storage or "")

    def create(self, job_id: str, *, attempt: int, key: str | None) -> JobHandle:
        storage = self.storage
        handle = JobHandle(
            job_id=job_id,
            storage=self.target.storage or "",
            target=self.target.to_dict(),
            name=self.name,
            created_at=time.time(),
            attempt=attempt,
            idempotency_key=key,
            tags=self.tags,
            signing_key=self.target.signing_key,
        )
        created = False
        backend = get_backend(self.target)
        # The local backend marks this process as the submitter until the launch is done,
        # so a job whose submitter dies half-way is known dead at once (other backends:
        # nothing to mark).
        submitting = getattr(backend, "submitting", None)
        with contextlib.ExitStack() as marked:
            try:
                # The payload streams to a staging file; the create-only handle.json is the lock
                # that decides this attempt; the payload is published only if we won it.
                with storage.open_write(
                    layout.job_file(job_id, layout.PAYLOAD), create_only=True
                ) as fh:
                    dump_envelope(
                        fh,
                        self.call,
                        kind="call",
                        job_id=job_id,
                        signing_key=self.target.signing_key,
                        storage=storage.uri,
                        by_value=self.by_value,
                    )
                    if submitting:  # before the handle exists, after storage proved writable
                        marked.enter_context(submitting(job_id))
                    storage.write_bytes(
                        layout.job_file(job_id, layout.HANDLE),
                        handle.record(),
                        create_only=True,
                    )
                    created = True
                backend.launch(
                    LaunchSpec(
                        job_id=job_id,
                        storage_uri=handle.storage,
                        target=self.target,
                        labels={"kinetic/job-id": job_id, **self.tags},
                        python_path=[p for p in sys.path if p],
                        workdir=os.getcwd(),
                        fuse_volumes=fuse_volumes(self.call),
                    )
                )
            except FileExistsError:
                if created:
                    raise
                raise _Raced(job_id) from None
            except BaseException as exc:
                if created:  # leave nothing half-submitted behind
                    storage.delete_prefix(layout.job_dir(job_id))
                if isinstance(exc, KineticError) or not isinstance(exc, Exception):
                    raise
                raise SubmissionError(
                    f"Could not launch job {job_id}: {type(exc).__name__}: {exc}"
                ) from exc
        if key is not None:
            self._record_attempt(key, attempt, job_id)
        return handle

    # ---- idempotency --------------------------------------------------------------------
    def _record_attempt(self, key: str, attempt: int, job_id: str) -> None:
        storage = self.storage
        try:
            index = json.loads(storage.read_bytes(layout.key_index(key)))
        except (FileNotFoundError, ValueError):
            index = {"key": key, "attempts": []}
        if job_id not in index["attempts"]:
            index["attempts"].append(job_id)
            storage.write_bytes(layout.key_index(key), json.dumps(index).encode())

    def latest_attempt(self, key: str) -> int:
        """Highest attempt whose handle exists: the index, then probing past it (the index
        is a hint that a crashed submitter may not have updated)."""
        storage = self.storage
        try:
            attempts = json.loads(storage.read_bytes(layout.key_index(key)))["attempts"]
        except (FileNotFoundError, ValueError, KeyError):
            attempts = []
        n = max((int(a.rsplit("-", 1)[1]) for a in attempts), default=0)
        while storage.exists(layout.job_file(keyed_id(key, n + 1), layout.HANDLE)):
            n += 1
        return n

    @retry(retry=retry_if_exception_type(_Raced), stop=stop_after_attempt(8), reraise=True)
    def submit_keyed(self, key: str, reuse_succeeded: bool = False) -> JobHandle:
        latest = self.latest_attempt(key)
        if latest:
            try:
                previous = load_handle(self.storage, keyed_id(key, latest), self.target.signing_key)
            except JobNotFound:  # deleted by a failed launch just now
                raise _Raced(key) from None
            state = previous.state()
            reusable = not state.terminal or (
                state.status is JobStatus.SUCCEEDED and (reuse_succeeded or not state.collected)
            )
            if reusable:
                return replace(previous, reattached=True)
        return self.create(keyed_id(key, latest + 1), attempt=latest + 1, key=key)


asubmit = in_thread(submit)
