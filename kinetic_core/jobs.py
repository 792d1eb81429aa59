"""JobHandle and the submit / attach / list_jobs / run entry points.

A JobHandle is small JSON-serializable data: everything needed to observe, collect and
clean up a job from any machine, and nothing else (no function, no secret values).
"""

from __future__ import annotations

import asyncio
import functools
import importlib.machinery
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from tenacity import retry, retry_if_exception_type, stop_after_attempt

from kinetic_core.backends import LaunchSpec, get_backend
from kinetic_core.config import Target, validate_tags
from kinetic_core.errors import (
    ConfigError,
    JobCancelled,
    JobFailed,
    JobNotFound,
    KineticError,
    ResultNotAvailable,
    SubmissionError,
)
from kinetic_core.ids import key_digest, keyed_id, new_id, validate_id
from kinetic_core.payload import dump_envelope, load_envelope, rebuild_exception
from kinetic_core.polling import interval_of, poll_ticks, shared_poller, wait_states
from kinetic_core.runner import output_dir
from kinetic_core.status import (
    RESULT_COLLECTED,
    JobState,
    JobStatus,
    backend_for,
    resolve_states,
    write_stop,
)
from kinetic_core.storage import Storage, open_storage

if TYPE_CHECKING:
    from kinetic_core.batch import BatchHandle

__all__ = [
    "JobHandle",
    "JobState",
    "JobStatus",
    "RemoteFunction",
    "attach",
    "list_jobs",
    "run",
    "submit",
]

HANDLE_VERSION = 1
P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class JobHandle:
    """A durable reference to one job. ``to_json()`` it anywhere; ``from_json`` to reattach.

    ``signing_key`` is never serialized: a process that loads a handle verifies
    envelopes with the key it was given, else ``KINETIC_SIGNING_KEY``.
    """

    job_id: str
    storage: str
    target: dict[str, Any]
    name: str = ""
    created_at: float = 0.0
    attempt: int = 1
    idempotency_key: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    signed: bool = False
    version: int = HANDLE_VERSION
    signing_key: str | None = field(default=None, repr=False, compare=False)

    # ---- serialization --------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("signing_key")
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, signing_key: str | None = None) -> JobHandle:
        """Load a handle; keys this version does not know are ignored (newer writers)."""
        known = {f.name for f in fields(cls)} - {"signing_key"}
        kwargs = {k: v for k, v in data.items() if k in known}
        validate_id(kwargs.get("job_id", ""))
        return cls(**kwargs, signing_key=signing_key)

    @classmethod
    def from_json(cls, text: str, *, signing_key: str | None = None) -> JobHandle:
        return cls.from_dict(json.loads(text), signing_key=signing_key)

    # ---- plumbing -------------------------------------------------------------------------
    @property
    def _key(self) -> str | None:
        return self.signing_key or os.environ.get("KINETIC_SIGNING_KEY") or None

    def _storage(self) -> Storage:
        return open_storage(self.storage)

    def _path(self, name: str) -> str:
        return f"jobs/{self.job_id}/{name}"

    @property
    def output_dir(self) -> str:
        """Where the function's own files go by default (its KINETIC_OUTPUT_DIR)."""
        return output_dir(self.storage, self.job_id)

    @property
    def location(self) -> str:
        """URI of the job's folder in storage (for links and people)."""
        return self._storage().location(f"jobs/{self.job_id}")

    # ---- observe --------------------------------------------------------------------------
    def state(self) -> JobState:
        return resolve_states([self])[0]

    def status(self) -> JobStatus:
        return self.state().status

    def done(self) -> bool:
        return self.state().terminal

    def wait(self, timeout: float | None = None) -> JobState:
        """Block until the job is terminal. WaitTimeout leaves it running."""
        return wait_states([self], timeout=timeout)[0]

    async def astate(self) -> JobState:
        return await asyncio.to_thread(self.state)

    async def await_done(self, timeout: float | None = None) -> JobState:
        """Async twin of ``wait``, through the event loop's shared poller."""
        return await shared_poller().wait(self, timeout)

    def logs(self, tail: int | None = None) -> str:
        return backend_for(self).logs(self.job_id, tail)

    def read_logs(self, cursor: str | None = None) -> tuple[str, str | None]:
        """Log text written after ``cursor`` (None: from the start) and the next cursor.

        Bounded per call: for streaming logs incrementally (e.g. from a trigger).
        """
        return backend_for(self).read_logs(self.job_id, cursor)

    def follow_logs(self, timeout: float | None = None) -> Iterator[str]:
        """Yield log lines as they are written, until the job ends and its log is drained."""
        cursor: str | None = None
        partial = ""
        finished = False
        for _ in poll_ticks(
            interval=min(interval_of(self), 1.0),
            timeout=timeout,
            describe=lambda: f"job {self.job_id} is still running",
        ):
            chunk, cursor = self.read_logs(cursor)
            lines = (partial + chunk).split("\n")
            partial = lines.pop()
            yield from lines
            if not chunk:
                if finished:
                    break
                finished = self.done()  # one more read after the end drains the tail
        if partial:
            yield partial

    # ---- collect --------------------------------------------------------------------------
    def result(self, timeout: float | None = None, *, cleanup: bool = True) -> Any:
        """Wait, then return the value or raise the remote exception.

        On success the job's backend resources and stored artifacts are cleaned up unless
        ``cleanup=False``; failed jobs keep everything for debugging.
        """
        return self._collect(self.wait(timeout), cleanup)

    async def aresult(self, timeout: float | None = None, *, cleanup: bool = True) -> Any:
        state = await self.await_done(timeout)
        return await asyncio.to_thread(self._collect, state, cleanup)

    def _collect(self, state: JobState, cleanup: bool) -> Any:
        storage = self._storage()
        if state.status is JobStatus.CANCELLED:
            raise JobCancelled(
                f"Job {self.job_id} was cancelled ({state.message}); it has no result."
            )
        try:
            _, body = load_envelope(
                storage,
                self._path("result.pkl"),
                kind="result",
                job_id=self.job_id,
                signing_key=self._key,
            )
        except FileNotFoundError:
            if storage.exists(self._path("collected.json")):
                raise ResultNotAvailable(
                    f"The result of job {self.job_id} was already collected and cleaned up. A result "
                    "can be read again only if the caller kept it: pass cleanup=False to result() "
                    "to keep it in storage."
                ) from None
            tail = self.logs(tail=50)
            raise JobFailed(
                f"Job {self.job_id} {state.status.value} ({state.reason}): {state.message}"
                + (f"\n--- last log lines ---\n{tail}" if tail else ""),
                state=state,
                log_tail=tail,
            ) from None
        if not body["success"]:
            raise rebuild_exception(body, self.job_id)
        self.mark_collected()
        if cleanup:
            self.cleanup()
        return body["value"]

    def mark_collected(self) -> None:
        """Record that the result was delivered without reading it (e.g. the caller passed
        a reference on). An idempotent submit with this job's key then starts a new attempt."""
        record = {"at": time.time(), "host": socket.gethostname()}
        self._storage().write_bytes(self._path("collected.json"), json.dumps(record).encode())

    # ---- stop -----------------------------------------------------------------------------
    def cancel(self) -> bool:
        """Cancel the job (durably: other processes see CANCELLED). False if already finished."""
        if self.done():
            return False
        write_stop(
            self._storage(),
            self.job_id,
            JobStatus.CANCELLED,
            "Cancelled",
            f"cancelled from {socket.gethostname()}",
        )
        backend_for(self).cancel(self.job_id)
        return True

    def cleanup(self, *, backend: bool = True, storage: bool = True, outputs: bool = False) -> None:
        """Free backend resources and stored envelopes.

        A small tombstone (handle and state records) stays so the job still resolves and
        an idempotency key knows it ran. ``outputs=True`` also deletes the function's own
        files under its output dir (off by default: they are usually the point).
        """
        if backend:
            if not self.done():
                self.cancel()
            backend_for(self).delete(self.job_id)
        if storage:
            st = self._storage()
            for name in ("payload.pkl", "result.pkl"):
                st.delete(self._path(name))
        if outputs:
            self._storage().delete_prefix(f"outputs/{self.job_id}")


# ---- submit ---------------------------------------------------------------------------------


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
) -> JobHandle:
    """Submit ``fn(*args, **kwargs)`` as a detached job and return its handle at once.

    With ``idempotency_key``: if the key's latest attempt is in flight, or succeeded and
    was not collected, that job's handle is returned instead of a new job; concurrent
    submitters with one key create exactly one job. ``reuse_succeeded=True`` also reuses
    a succeeded attempt whose result was already collected (keep it with
    ``result(cleanup=False)``), e.g. so a whole-pipeline retry does not rerun it.
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
            signed=bool(self.target.signing_key),
            signing_key=self.target.signing_key,
        )
        created = False
        try:
            # The payload streams to a staging file; the create-only handle.json is the lock
            # that decides this attempt; the payload is published only if we won it.
            with storage.open_write(f"jobs/{job_id}/payload.pkl", create_only=True) as fh:
                dump_envelope(
                    fh,
                    self.call,
                    kind="call",
                    job_id=job_id,
                    signing_key=self.target.signing_key,
                    by_value=self.by_value,
                )
                storage.write_bytes(
                    f"jobs/{job_id}/handle.json", handle.to_json().encode(), create_only=True
                )
                created = True
            get_backend(self.target).launch(
                LaunchSpec(
                    job_id=job_id,
                    storage_uri=handle.storage,
                    target=self.target,
                    labels={"kinetic/job-id": job_id, **self.tags},
                    python_path=[p for p in sys.path if p],
                    workdir=os.getcwd(),
                )
            )
        except FileExistsError:
            if created:
                raise
            raise _Raced(job_id) from None
        except BaseException as exc:
            if created:  # leave nothing half-submitted behind
                storage.delete_prefix(f"jobs/{job_id}")
            if isinstance(exc, KineticError) or not isinstance(exc, Exception):
                raise
            raise SubmissionError(
                f"Could not launch job {job_id}: {type(exc).__name__}: {exc}"
            ) from exc
        if key is not None:
            self._record_attempt(key, attempt, job_id)
        return handle

    # ---- idempotency --------------------------------------------------------------------
    def _index_key(self, key: str) -> str:
        return f"keys/{key_digest(key)}.json"

    def _record_attempt(self, key: str, attempt: int, job_id: str) -> None:
        storage = self.storage
        try:
            index = json.loads(storage.read_bytes(self._index_key(key)))
        except (FileNotFoundError, ValueError):
            index = {"key": key, "attempts": []}
        if job_id not in index["attempts"]:
            index["attempts"].append(job_id)
            storage.write_bytes(self._index_key(key), json.dumps(index).encode())

    def latest_attempt(self, key: str) -> int:
        """Highest attempt whose handle exists: the index, then probing past it (the index
        is a hint that a crashed submitter may not have updated)."""
        storage = self.storage
        try:
            attempts = json.loads(storage.read_bytes(self._index_key(key)))["attempts"]
        except (FileNotFoundError, ValueError, KeyError):
            attempts = []
        n = max((int(a.rsplit("-", 1)[1]) for a in attempts), default=0)
        while storage.exists(f"jobs/{keyed_id(key, n + 1)}/handle.json"):
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
                state.status is JobStatus.SUCCEEDED
                and (reuse_succeeded or state.message != RESULT_COLLECTED)
            )
            if reusable:
                return previous
        return self.create(keyed_id(key, latest + 1), attempt=latest + 1, key=key)


# ---- attach / list ------------------------------------------------------------------------


def load_handle(storage: Storage, job_id: str, signing_key: str | None = None) -> JobHandle:
    validate_id(job_id)
    try:
        raw = storage.read_bytes(f"jobs/{job_id}/handle.json")
    except FileNotFoundError:
        raise JobNotFound(
            f"No job {job_id!r} under {storage.uri}. Check the id, and that KINETIC_STORAGE "
            "(or storage=) points at the storage the job was submitted to."
        ) from None
    return JobHandle.from_json(raw.decode(), signing_key=signing_key)


def attach(job_id: str, *, target: Target | dict[str, Any] | None = None) -> JobHandle:
    """Reattach to a job from any process or machine that can read its storage root."""
    resolved = Target.coerce(target).resolve()
    return load_handle(open_storage(resolved.storage or ""), job_id, resolved.signing_key)


def list_jobs(
    *,
    status: JobStatus | str | None = None,
    tags: dict[str, str] | None = None,
    name: str | None = None,
    since: float | None = None,
    until: float | None = None,
    limit: int | None = None,
    target: Target | dict[str, Any] | None = None,
) -> list[JobHandle]:
    """Jobs under the storage root, newest first, filtered by tags/name/time/status."""
    resolved = Target.coerce(target).resolve()
    storage = open_storage(resolved.storage or "")
    handles = []
    for job_id in storage.list_names("jobs"):
        try:
            handle = load_handle(storage, job_id, resolved.signing_key)
        except (JobNotFound, ValueError, TypeError):
            continue  # a job being submitted right now, or a stray folder
        if name is not None and handle.name != name:
            continue
        if tags and any(handle.tags.get(k) != v for k, v in tags.items()):
            continue
        if (since is not None and handle.created_at < since) or (
            until is not None and handle.created_at > until
        ):
            continue
        handles.append(handle)
    handles.sort(key=lambda h: h.created_at, reverse=True)
    if status is not None:
        wanted = JobStatus(status)
        handles = [
            h for h, s in zip(handles, resolve_states(handles), strict=True) if s.status is wanted
        ]
    return handles[:limit] if limit is not None else handles


# ---- @run -----------------------------------------------------------------------------------

_JOB_OPTIONS = ("idempotency_key", "name", "tags")


class RemoteFunction(Generic[P, R]):
    """A function that runs as a detached job. Calling it waits for the result."""

    def __init__(self, fn: Callable[P, R], *, target: Target, options: dict[str, Any]) -> None:
        if not callable(fn):
            raise SubmissionError(f"@run needs a callable, got {type(fn).__name__}.")
        self.fn = fn
        self.target = target
        self.job_options = options
        functools.update_wrapper(self, fn)

    def options(self, **overrides: Any) -> RemoteFunction[P, R]:
        """A copy with other job options (idempotency_key, name, tags) or Target fields."""
        job = {k: overrides.pop(k) for k in _JOB_OPTIONS if k in overrides}
        if "tags" in job:  # tags add up; other options replace
            job["tags"] = {**self.job_options.get("tags", {}), **validate_tags(job["tags"])}
        target = self.target.merge(Target.coerce(overrides.pop("target", None)))
        target = target.merge(Target.from_dict(overrides))
        return RemoteFunction(self.fn, target=target, options={**self.job_options, **job})

    def run_async(self, *args: P.args, **kwargs: P.kwargs) -> JobHandle:
        return submit(self.fn, args, kwargs, target=self.target, **self.job_options)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.run_async(*args, **kwargs).result()

    def run_async_map(self, inputs: Any, **options: Any) -> BatchHandle:
        """Fan out over ``inputs`` as one batch (see ``kinetic_core.submit_map``)."""
        from kinetic_core.batch import submit_map

        options.setdefault("target", self.target)
        for key in ("name", "tags"):
            if key in self.job_options:
                options.setdefault(key, self.job_options[key])
        return submit_map(self.fn, inputs, **options)


def run(
    fn: Callable[P, R] | None = None,
    *,
    target: Target | dict[str, Any] | None = None,
    **options: Any,
) -> Any:
    """Decorator: ``@run`` or ``@run(tags=..., life_span=..., backend=...)``.

    Keyword arguments are job options (idempotency_key, name, tags) or Target fields.
    """
    job = {k: options.pop(k) for k in _JOB_OPTIONS if k in options}
    resolved = Target.coerce(target).merge(Target.from_dict(options))

    def wrap(f: Callable[P, R]) -> RemoteFunction[P, R]:
        return RemoteFunction(f, target=resolved, options=job)

    return wrap(fn) if fn is not None else wrap
