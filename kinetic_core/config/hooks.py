"""Hooks (xqute's plugin hooks): code of yours that runs when jobs are submitted and change state.

A hook object has any of the methods in ``HOOKS``; it is registered with
``register_hooks(obj)`` or installed as a plugin under the entry-point group
``kinetic_workflows.hooks`` (the entry point names an object, a module or a zero-arg
factory), discovered once per process, so one plugin serves Airflow, Prefect and scripts.

- ``on_job_submitting(spec)`` runs in the submitting process before anything is written;
  returning False or raising refuses the submission (``SubmissionRefused``).
- ``on_job_submitted(job)`` runs once per new job (not for an idempotent reattach).
- The transition hooks run once per transition across every process that observes the job:
  the process whose create-only marker write wins (``history.note``) calls them; others do
  not. At-most-once: a process killed between that write and the call loses the call.
- ``on_job_recovered(job, successor)`` runs in the process that created the next attempt.

Any other hook that raises is logged (this module's logger) and never breaks a submit,
a wait or a status read. Methods may be ``async def``: they are run to completion on an
event loop kept for hooks (the shared poller resolves states in a worker thread, so its
loop never waits on a hook, sync or async). Hooks receive a JobHandle without its
signing key.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import inspect
import logging
import os
import threading
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from kinetic_core.errors import ConfigError, SubmissionRefused

if TYPE_CHECKING:
    from kinetic_core.config.target import Target

__all__ = ["ENTRY_POINT_GROUP", "HOOKS", "SubmitSpec", "register_hooks", "unregister_hooks"]

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "kinetic_workflows.hooks"
HOOKS = (
    "on_job_submitting",
    "on_job_submitted",
    "on_job_started",
    "on_job_succeeded",
    "on_job_failed",
    "on_job_cancelled",
    "on_job_recovered",
)

_registered: list[Any] = []
_plugins: list[Any] | None = None  # entry-point hooks, loaded on first use
_lock = threading.Lock()


@dataclass(frozen=True)
class SubmitSpec:
    """What ``on_job_submitting`` sees of a submission (read-only; no arguments, no secrets)."""

    #: ``module.qualname`` of the submitted callable.
    function: str
    #: The job's name (``name=``, else the function's qualified name).
    name: str
    tags: Mapping[str, str]
    #: The resolved Target without secrets (as the job's handle stores it).
    target: Mapping[str, Any]
    idempotency_key: str | None
    #: Who submits (``owner=``, ``KINETIC_OWNER``, else the login) and the free-text
    #: ``description=``: e.g. for a policy hook that refuses unowned nightly jobs.
    owner: str = ""
    description: str = ""

    @classmethod
    def of(
        cls,
        fn: Any,
        name: str,
        tags: dict[str, str],
        target: Target,
        key: str | None,
        *,
        owner: str = "",
        description: str = "",
    ) -> SubmitSpec:
        qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
        module = getattr(fn, "__module__", None)
        return cls(
            function=f"{module}.{qualname}" if module else qualname,
            name=name,
            tags=MappingProxyType(dict(tags)),
            target=MappingProxyType(target.to_dict()),
            idempotency_key=key,
            owner=owner,
            description=description,
        )


def _check(obj: Any) -> None:
    """A hook object must have a hook, and no misspelt one (it would never be called)."""
    names = {n for n in dir(obj) if n.startswith("on_job_")}
    unknown = sorted(names - set(HOOKS))
    if unknown or not names & set(HOOKS):
        raise ConfigError(
            f"{obj!r} is not a hook object: "
            + (f"{', '.join(unknown)} is not a hook; " if unknown else "it has no hook; ")
            + f"hooks are {', '.join(HOOKS)}."
        )


def register_hooks(obj: Any) -> Any:
    """Call ``obj``'s hook methods from now on in this process; returns ``obj``. Registering
    one object twice registers it once."""
    _check(obj)
    with _lock:
        if not any(h is obj for h in _registered):
            _registered.append(obj)
    return obj


def unregister_hooks(obj: Any) -> None:
    """Stop calling ``obj``'s hooks (a no-op if it was not registered)."""
    with _lock:
        _registered[:] = [h for h in _registered if h is not obj]


def active() -> list[Any]:
    """Registered hooks, then installed plugins (discovered on the first call)."""
    global _plugins
    if _plugins is None:
        found = _discover()
        with _lock:
            if _plugins is None:
                _plugins = found
    with _lock:
        registered = list(_registered)
    return registered + [p for p in _plugins if not any(p is h for h in registered)]


def _discover() -> list[Any]:
    """The hook objects of the ``kinetic_workflows.hooks`` entry points; a plugin that
    cannot be loaded is logged and left out."""
    from importlib.metadata import entry_points

    found = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            if inspect.isclass(obj) or (callable(obj) and not _has_hooks(obj)):
                obj = obj()  # a zero-arg factory
            _check(obj)
        except Exception:
            log.exception("kinetic: hook plugin %s = %s is not loaded", ep.name, ep.value)
            continue
        found.append(obj)
    return found


def _has_hooks(obj: Any) -> bool:
    return any(hasattr(obj, n) for n in HOOKS)


def public(job: Any) -> Any:
    """The handle hooks get: without its signing key."""
    return dataclasses.replace(job, signing_key=None) if getattr(job, "signing_key", None) else job


def submitting(spec: SubmitSpec) -> None:
    """Ask every ``on_job_submitting``; SubmissionRefused if one says False or raises."""
    for hook in active():
        method = getattr(hook, "on_job_submitting", None)
        if method is None:
            continue
        try:
            answer = _call(method, spec)
        except Exception as exc:
            raise SubmissionRefused(
                f"Submission of {spec.name!r} refused by {hook!r}.on_job_submitting: "
                f"{type(exc).__name__}: {exc}. Nothing was written; change the submission "
                "or the hook, or unregister it (kinetic_core.unregister_hooks).",
                hook=repr(hook),
            ) from exc
        if answer is False:
            raise SubmissionRefused(
                f"Submission of {spec.name!r} refused by {hook!r}.on_job_submitting (it "
                "returned False). Nothing was written; change the submission or the hook, "
                "or unregister it (kinetic_core.unregister_hooks).",
                hook=repr(hook),
            )


def fire(event: str, *args: Any) -> None:
    """Call hook ``event`` of every hook object; what a hook raises is logged, not raised."""
    for hook in active():
        method = getattr(hook, event, None)
        if method is None:
            continue
        try:
            _call(method, *args)
        except Exception:
            log.exception("kinetic: hook %r.%s raised (ignored)", hook, event)


def _call(method: Any, *args: Any) -> Any:
    """Call a hook method; an awaitable it returns is run to completion."""
    result = method(*args)
    return _complete(result) if inspect.isawaitable(result) else result


def _complete(awaitable: Awaitable[Any]) -> Any:
    """Run a hook's coroutine to completion from sync code: on the hooks' event loop, or
    (called from a thread that runs an event loop, which must not wait on itself) on a
    loop of its own in a worker thread."""

    async def run() -> Any:
        return await awaitable

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run_coroutine_threadsafe(run(), _hook_loop()).result()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, run()).result()


_loop: asyncio.AbstractEventLoop | None = None
_loop_pid: int | None = None


def _hook_loop() -> asyncio.AbstractEventLoop:
    """One event loop per process for async hooks (a daemon thread; again after a fork):
    not the shared poller's, so a hook that blocks cannot stall every waiter, and a
    hook's clients (an aiohttp session) stay on one loop across calls."""
    global _loop, _loop_pid
    with _lock:
        if _loop is None or _loop_pid != os.getpid():
            _loop, _loop_pid = asyncio.new_event_loop(), os.getpid()
            threading.Thread(target=_loop.run_forever, name="kinetic-hooks", daemon=True).start()
        return _loop
