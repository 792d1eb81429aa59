"""Submission and idempotency: ``submit`` turns a call into exactly one job per attempt.

A job is created as every attempt is (``launching.create_attempt``), so a crash at any
point leaves nothing half submitted. With an idempotency key, attempt ids are deterministic (``keyed_id``), so concurrent
submitters of one key race for the same ``handle.json`` and exactly one wins.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import IO, Any

from tenacity import retry, retry_if_exception_type, stop_after_attempt

from kinetic_core.backends import BackendKind
from kinetic_core.config import hooks
from kinetic_core.config.target import Target, validate_tags
from kinetic_core.control import recovery
from kinetic_core.control.launching import AttemptTaken, create_attempt, launch_spec
from kinetic_core.control.resolution import backend_for
from kinetic_core.data.inputs import Data, check_volumes, fuse_volumes, reference_data
from kinetic_core.data.inputs import prepare as prepare_data
from kinetic_core.data.outputs import check_output_dir
from kinetic_core.errors import ConfigError, IdempotencyConflict, JobNotFound, SubmissionError
from kinetic_core.jobs.fingerprint import bind_call, call_fingerprint, function_name
from kinetic_core.jobs.handle import JobHandle, load_handle
from kinetic_core.jobs.listing import check_description, resolve_owner
from kinetic_core.records import layout
from kinetic_core.records.envelope import dump_envelope
from kinetic_core.states import JobStatus, Reason
from kinetic_core.storage import Storage, open_storage
from kinetic_core.util import registry
from kinetic_core.util.envvars import job_env
from kinetic_core.util.ids import keyed_id, new_id
from kinetic_core.util.waits import in_thread

__all__ = ["asubmit", "launch_staged", "prepare", "submit"]


#: How long a keyed submit waits for the processes of the key's ended attempt to stop
#: (a pod's default grace period is 30 s) before it refuses to start the next beside them.
OLD_ATTEMPT_WAIT = 90.0


class _Raced(Exception):
    """Another submitter created this attempt first."""


def _check_call(fn: Any, args: Any, kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's args and kwargs, checked as calling ``fn`` with them would check them."""
    if not callable(fn):
        raise SubmissionError(f"Expected a callable to run, got {type(fn).__name__}: {fn!r}.")
    if not isinstance(args, tuple | list):
        raise SubmissionError(f"args must be a tuple or list, got {type(args).__name__}.")
    kwargs = {} if kwargs is None else kwargs
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise SubmissionError(f"kwargs must be a dict with str keys, got {kwargs!r}.")
    return tuple(args), dict(kwargs)


def _bind(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    try:
        return bind_call(fn, args, kwargs)
    except TypeError as exc:
        raise SubmissionError(
            f"{function_name(fn)} cannot be called with these arguments ({exc}): fix the "
            "args/kwargs of the submit; no job was created."
        ) from None


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
    owner: str | None = None,
    description: str | None = None,
    output_dir: str | None = None,
    debug: bool | None = None,
    keep: bool = False,
    reattach_any: bool = False,
) -> JobHandle:
    """Submit ``fn(*args, **kwargs)`` as a detached job and return its handle at once.

    With ``idempotency_key``: if the key's latest attempt is in flight, or succeeded and
    was not collected, that job's handle is returned instead of a new job; concurrent
    submitters with one key create exactly one job. ``reuse_succeeded=True`` also reuses
    a succeeded attempt whose result was already collected (keep it with
    ``result(cleanup=False)``), e.g. so a whole-pipeline retry does not rerun it. A
    submit of another call (another function, other arguments) under a key whose job it
    would return raises IdempotencyConflict, unless ``reattach_any=True``.

    Every ``Data`` in the arguments arrives in the job as a local path; ``volumes`` maps
    absolute paths in the job to ``Data`` (Kubernetes backends; see docs/data.md).
    ``owner`` (default ``KINETIC_OWNER``, else the login) and ``description`` (free text,
    at most 1,000 characters) are kept in the handle for ``list_jobs`` and the CLI.
    ``output_dir`` (gs://... or file://...) keeps the job's outputs in
    ``{output_dir}/{job_id}/``; ``debug=True`` keeps a failed job's processes or pod for
    inspection (both are also Target fields; see docs/data.md and docs/concepts.md).
    ``keep=True`` pins the job: ``kinetic gc`` never removes it (docs/storage-lifecycle.md).
    """
    target = _with_job_fields(target, output_dir=output_dir, debug=debug)
    plan = prepare(
        fn,
        args,
        kwargs,
        target=target,
        name=name,
        tags=tags,
        volumes=volumes,
        announce=True,
        idempotency_key=idempotency_key,
        owner=owner,
        description=description,
    )
    plan.keep = bool(keep)
    if idempotency_key is None:
        return plan.create(new_id(plan.name), attempt=1, key=None)
    if not isinstance(idempotency_key, str) or not idempotency_key:
        raise ConfigError("idempotency_key must be a non-empty string.")
    return plan.submit_keyed(idempotency_key, reuse_succeeded, reattach_any=bool(reattach_any))


def _with_job_fields(target: Target | dict[str, Any] | None, **fields: Any) -> Target:
    """``target`` with the Target fields given as submit arguments (those not None)."""
    return Target.coerce(target).merge({k: v for k, v in fields.items() if v is not None})


def prepare(
    fn: Callable[..., Any],
    args: tuple[Any, ...] | list[Any] = (),
    kwargs: dict[str, Any] | None = None,
    *,
    target: Target | dict[str, Any] | None = None,
    name: str | None = None,
    tags: dict[str, str] | None = None,
    volumes: dict[str, Data] | None = None,
    announce: bool = False,
    idempotency_key: str | None = None,
    owner: str | None = None,
    description: str | None = None,
) -> _Submission:
    """Check a call and capture what a job of it needs (env values, by-value modules); its
    ``Data`` are uploaded (content-addressed: once) and travel as references. ``announce``:
    ask the ``on_job_submitting`` hooks first (SubmissionRefused: nothing written)."""
    args, kwargs = _check_call(fn, args, kwargs)
    arguments = _bind(fn, args, kwargs)
    resolved = Target.coerce(target).resolve()
    all_tags = {**(resolved.tags or {}), **validate_tags(tags or {})}
    about = {"owner": resolve_owner(owner), "description": check_description(description)}
    job_name = name or getattr(fn, "__qualname__", None) or type(fn).__name__
    if announce:
        spec = hooks.SubmitSpec.of(fn, job_name, all_tags, resolved, idempotency_key, **about)
        hooks.submitting(spec)
    call = {"fn": fn, "args": args, "kwargs": kwargs, "env": job_env(resolved.env, os.environ)}
    kind: BackendKind = registry.backend_kind(resolved.backend)
    _say_ignored(resolved)
    if resolved.output_dir:
        check_output_dir(resolved.output_dir)
    mounts = check_volumes(
        volumes, backend=str(resolved.backend), supports_volumes=kind.supports_volumes
    )
    # Only a keyed submit compares calls; taken before Data become references.
    fingerprint = call_fingerprint(fn, arguments) if idempotency_key is not None else ""
    call = prepare_data(call, mounts, open_storage(resolved.storage or ""))
    modules = _by_value_modules(fn, resolved)
    return _Submission(
        resolved,
        call,
        modules,
        job_name,
        all_tags,
        about["owner"],
        about["description"],
        fingerprint=fingerprint,
    )


_said: set[tuple[str, ...]] = set()  # (backend, *options) already warned of in this process


def _say_ignored(target: Target) -> None:
    """Warn once per process and backend of the options it ignores: a ``spot=True`` or an
    ``accelerator`` that silently did nothing would be found only in the bill or the run
    time."""
    ignored = target.ignored_options()
    said = (str(target.backend), *ignored)
    if not ignored or said in _said:
        return
    _said.add(said)
    warnings.warn(
        f"the {target.backend} backend ignores {', '.join(ignored)}: these options apply to "
        f"another backend (choose it with backend= or KINETIC_BACKEND), or drop them.",
        UserWarning,
        stacklevel=3,
    )


def launch_staged(
    handle: JobHandle,
    *,
    python_path: list[str],
    workdir: str | None,
    record: JobHandle | None = None,
) -> JobHandle:
    """Launch a job whose call was staged earlier (``_Submission.stage``): create its
    ``handle.json`` (create-only; another launcher may have created it) and launch it.
    Idempotent: a backend launches a job id once, so racing launchers start it once.
    ``record`` is what ``handle.json`` says when this process reaches the backend
    differently from everyone else (a driver in a pod: in-cluster credentials)."""
    target = replace(Target.from_stored(handle.target), signing_key=handle.signing_key)
    spec = launch_spec(
        handle.job_id, handle.storage, target, handle.tags, python_path=python_path, workdir=workdir
    )
    create_attempt(
        open_storage(handle.storage), spec, (record or handle).record(), write_payload=None
    )
    return handle


@dataclass
class _Submission:
    target: Target
    call: dict[str, Any]
    by_value: list[str]
    name: str
    tags: dict[str, str]
    owner: str = ""
    description: str = ""
    keep: bool = False
    fingerprint: str = ""

    @property
    def storage(self) -> Storage:
        return open_storage(self.target.storage or "")

    def stage(self, job_id: str) -> None:
        """Write the call envelope only (create-only): the job exists once launched
        (``launch_staged``). FileExistsError if it was staged already."""
        with self.storage.open_write(
            layout.job_file(job_id, layout.PAYLOAD), create_only=True
        ) as fh:
            self._write_call(fh, job_id)

    def _write_call(self, fh: IO[bytes], job_id: str) -> None:
        reference_data(self.storage, self.call, job_id)  # before the job can exist (gc.py)
        dump_envelope(
            fh,
            self.call,
            kind="call",
            job_id=job_id,
            signing_key=self.target.signing_key,
            storage=self.storage.uri,
            by_value=self.by_value,
        )

    def create(self, job_id: str, *, attempt: int, key: str | None) -> JobHandle:
        handle = JobHandle(
            job_id=job_id,
            storage=self.target.storage or "",
            target=self.target.to_dict(),
            name=self.name,
            created_at=time.time(),
            attempt=attempt,
            idempotency_key=key,
            tags=self.tags,
            owner=self.owner,
            description=self.description,
            keep=self.keep,
            call_fingerprint=self.fingerprint,
            signing_key=self.target.signing_key,
        )
        spec = launch_spec(
            job_id, handle.storage, self.target, self.tags, fuse_volumes=fuse_volumes(self.call)
        )
        try:
            create_attempt(
                self.storage,
                spec,
                handle.record(),
                write_payload=lambda fh: self._write_call(fh, job_id),
            )
        except AttemptTaken:
            raise _Raced(job_id) from None
        if key is not None:
            self._record_attempt(key, attempt, job_id)
        hooks.fire("on_job_submitted", hooks.public(handle))  # a new job: never a reattach
        return handle

    def relaunch(self, handle: JobHandle) -> None:
        """Launch an attempt that no backend has yet: its submitter died (or lost the
        backend's answer) between ``handle.json`` and the launch. Idempotent per job id,
        so a submitter that is still launching it starts it once all the same."""
        spec = launch_spec(
            handle.job_id,
            handle.storage,
            self.target,
            self.tags,
            fuse_volumes=fuse_volumes(self.call),
        )
        create_attempt(self.storage, spec, handle.record(), write_payload=None)

    def _launched(self, job_id: str) -> bool:
        """The attempt's launch was recorded (the backend took it whole): a launch cut
        short after the backend's first create (a Kubernetes Job made, its Secret not yet)
        is not, and a resubmit launches it again (idempotent per job id)."""
        return self.storage.exists(layout.job_file(job_id, layout.LAUNCHED))

    # ---- idempotency --------------------------------------------------------------------
    def _check_same_call(self, key: str, previous: JobHandle) -> None:
        """IdempotencyConflict when ``previous`` (the job ``key`` would return) runs another
        call than this submit's. A handle without a fingerprint (an older writer) passes."""
        theirs = previous.call_fingerprint
        if not theirs or not self.fingerprint or theirs == self.fingerprint:
            return
        what = (
            "other arguments"
            if theirs.rpartition(":")[0] == self.fingerprint.rpartition(":")[0]
            else f"another function ({theirs.rpartition(':')[0]})"
        )
        raise IdempotencyConflict(
            f"Idempotency key {key!r} already has job {previous.job_id} in flight or "
            f"uncollected, which runs {what} than this submit of "
            f"{self.fingerprint.rpartition(':')[0]}. Use another key for another call; or "
            f"wait for that job (kc.attach({previous.job_id!r}).result()) and submit again; "
            "or pass reattach_any=True to get that job whatever it runs.",
            job_id=previous.job_id,
        )

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
        """Highest attempt whose handle exists or that ``kinetic gc`` removed: the index,
        then probing past it (the index is a hint that a crashed submitter may not have
        updated)."""
        storage = self.storage
        n = removed_attempts(storage, key)
        try:
            attempts = json.loads(storage.read_bytes(layout.key_index(key)))["attempts"]
        except (FileNotFoundError, ValueError, KeyError):
            attempts = []
        n = max([n, *(int(a.rsplit("-", 1)[1]) for a in attempts)])
        while storage.exists(layout.job_file(keyed_id(key, n + 1), layout.HANDLE)):
            n += 1
        return n

    @retry(retry=retry_if_exception_type(_Raced), stop=stop_after_attempt(8), reraise=True)
    def submit_keyed(
        self, key: str, reuse_succeeded: bool = False, *, reattach_any: bool = False
    ) -> JobHandle:
        latest = self.latest_attempt(key)
        if latest:
            try:
                previous = load_handle(self.storage, keyed_id(key, latest), self.target.signing_key)
            except JobNotFound:  # deleted by a failed launch just now, or by kinetic gc
                if latest <= removed_attempts(self.storage, key):
                    return self.create(keyed_id(key, latest + 1), attempt=latest + 1, key=key)
                raise _Raced(key) from None
            state = previous.state()
            reusable = not state.terminal or (
                state.status is JobStatus.SUCCEEDED and (reuse_succeeded or not state.collected)
            )
            if reusable:
                if not reattach_any:
                    self._check_same_call(key, previous)
                if state.reason == Reason.SUBMITTING or (
                    not state.terminal and not self._launched(previous.job_id)
                ):  # its submitter died (or lost the answer) before the launch was recorded
                    self.relaunch(previous)
                return replace(previous, reattached=True)
            ended = (
                previous
                if state.job_id == previous.job_id
                else load_handle(self.storage, state.job_id, self.target.signing_key)
            )
            recovery.wait_attempt_gone(backend_for(ended), ended, OLD_ATTEMPT_WAIT)
        return self.create(keyed_id(key, latest + 1), attempt=latest + 1, key=key)


def removed_attempts(storage: Storage, key: str) -> int:
    """The highest attempt of ``key`` that ``kinetic gc`` removed (0: none): attempt ids
    are never reused, so the next submit with the key starts past it."""
    try:
        removed = json.loads(storage.read_bytes(layout.key_index(key))).get("removed", 0)
    except (FileNotFoundError, ValueError, AttributeError):
        return 0
    return removed if isinstance(removed, int) and not isinstance(removed, bool) else 0


asubmit = in_thread(submit)
