"""``@kinetic_task``: a real Prefect task whose function body runs remotely as a Kinetic job.

The task run is where the waiting happens: the body submits the call with an
idempotency key derived from the task run's identity (so Prefect retries and flow-run
retries reattach instead of launching duplicates), then waits on the process-wide
shared poller while forwarding the job's log lines to the run logger.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar, cast
from uuid import UUID

import anyio
import cloudpickle
from prefect import Task
from prefect.artifacts import acreate_markdown_artifact
from prefect.context import FlowRunContext, TaskRunContext
from prefect.exceptions import ObjectNotFound
from prefect.logging import get_run_logger
from prefect.states import Cancelled, State
from prefect.utilities.asyncutils import run_coro_as_sync
from prefect.utilities.hashing import hash_objects

import kinetic_core as kc
from kinetic_prefect.artifacts import job_markdown
from kinetic_prefect.blocks import KineticConfig
from kinetic_prefect.hub import submit_to_hub

R = TypeVar("R")

TARGET_FIELDS = frozenset(f.name for f in dataclasses.fields(kc.Target)) - {"tags"}
ConfigLike = str | KineticConfig | kc.Target | dict[str, Any] | None
# Errors that another attempt cannot fix: Prefect does not retry them.
NOT_RETRYABLE: tuple[type[BaseException], ...] = (kc.ConfigError, kc.SerializationError)

_log = logging.getLogger("kinetic_prefect")


# ---- configuration ---------------------------------------------------------------------------


def check_config(config: Any) -> ConfigLike:
    """Validate ``config=`` at decoration time (block names are looked up at run time)."""
    if config is None or isinstance(config, KineticConfig):
        return config
    if isinstance(config, str):
        if not config.strip():
            raise kc.ConfigError("config must be a KineticConfig block name, not an empty string.")
        return config
    if isinstance(config, kc.Target | dict):
        target = kc.Target.coerce(config)
        target.validate()
        return target
    raise kc.ConfigError(
        "config must be a KineticConfig block name, a KineticConfig, a kinetic_core.Target, "
        f"a dict or None, not {type(config).__name__}."
    )


async def load_config(name: str) -> KineticConfig:
    """Load a saved KineticConfig block; a clear ConfigError if there is none by that name."""
    try:
        return cast(KineticConfig, await KineticConfig.aload(name))
    except (ValueError, ObjectNotFound) as exc:
        raise kc.ConfigError(
            f"No KineticConfig block named {name!r} on this Prefect server. Create it with "
            f"KineticConfig(...).save({name!r}) (after `prefect block register -m kinetic_prefect`), "
            "or pass config=None to use KINETIC_* environment variables and defaults."
        ) from exc


async def resolve_target(config: ConfigLike, overrides: kc.Target) -> kc.Target:
    """Block/config, then decorator overrides, then KINETIC_* env and defaults; validated."""
    if isinstance(config, str):
        base = (await load_config(config)).to_target()
    elif isinstance(config, KineticConfig):
        base = config.to_target()
    else:
        base = kc.Target.coerce(config)
    return base.merge(overrides).resolve()


# ---- identity -------------------------------------------------------------------------------


_identity_lock = threading.Lock()


def task_run_identity(
    ctx: TaskRunContext | None, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
) -> tuple[str | None, dict[str, str]]:
    """Idempotency key and job tags for the current task run.

    Prefect retries keep the task run, so a retry finds the key it used before. A
    flow-run retry creates new task runs; to let them find the jobs of the earlier flow
    attempt the key is (flow run, task, hash of the arguments, n-th such call in this
    flow attempt): calls with equal arguments are interchangeable, so concurrent calls
    completing out of order cannot swap jobs with different inputs. Arguments that
    cannot be hashed fall back to a key per task run (task retries still reattach).
    """
    if ctx is None:
        return None, {}
    run = ctx.task_run
    tags = {"prefect-task-run": str(run.id)}
    flow_ctx = FlowRunContext.get()
    if run.flow_run_id is None or flow_ctx is None or flow_ctx.flow_run is None:
        return f"prefect/task-run/{run.id}", tags
    tags["prefect-flow-run"] = str(run.flow_run_id)
    digest = hash_objects(args, kwargs or {})
    if digest is None:
        return f"prefect/task-run/{run.id}", tags
    # The flow run context is created afresh for each flow-run attempt, so counting in
    # it restarts at 0 on a flow retry; the per-task-run entry keeps Prefect retries stable.
    registry = flow_ctx.task_run_dynamic_keys
    with _identity_lock:
        assigned = registry.get(f"kinetic-prefect/run/{run.id}")
        if not isinstance(assigned, str):
            slot = f"kinetic-prefect/{run.task_key}/{digest}"
            count = registry.get(slot, 0)
            n = count if isinstance(count, int) else 0
            registry[slot] = n + 1
            assigned = f"prefect/flow-run/{run.flow_run_id}/{run.task_key}/{digest}/{n}"
            registry[f"kinetic-prefect/run/{run.id}"] = assigned
    return assigned, tags


# ---- waiting --------------------------------------------------------------------------------


class LogForwarder:
    """Forwards a job's new log lines to a logger, incrementally (cursor-based reads)."""

    def __init__(self, handle: kc.JobHandle, logger: Any) -> None:
        self.handle = handle
        self.logger = logger
        self.cursor: str | None = None
        self.partial = ""
        self.broken = False

    async def forward(self) -> bool:
        """Emit the complete lines written since the last call; True if there was text."""
        if self.broken:
            return False
        try:
            text, self.cursor = await asyncio.to_thread(self.handle.read_logs, self.cursor)
        except Exception as exc:  # logs are best effort; never fail the task over them
            self.broken = True
            self.logger.warning("Cannot read the logs of job %s: %s", self.handle.job_id, exc)
            return False
        if not text:
            return False
        lines = (self.partial + text).split("\n")
        self.partial = lines.pop()
        for line in lines:
            self.logger.info("[%s] %s", self.handle.job_id, line.rstrip("\r"))
        return True

    async def drain(self, max_reads: int = 10_000) -> None:
        """After the job ended: read what is left (reads are bounded in size)."""
        for _ in range(max_reads):
            if not await self.forward():
                break
        if self.partial:
            self.logger.info("[%s] %s", self.handle.job_id, self.partial)
            self.partial = ""


_flow_run_checks: dict[UUID, tuple[float, bool]] = {}
_flow_run_checks_lock = threading.Lock()


async def flow_run_cancelling(flow_run_id: UUID, max_age: float) -> bool:
    """Whether the flow run is Cancelling/Cancelled, asked at most once per ``max_age`` per
    flow run in this process (all of its Kinetic tasks share the answer)."""
    now = time.monotonic()
    with _flow_run_checks_lock:
        cached = _flow_run_checks.get(flow_run_id)
    if cached is not None and now - cached[0] < max_age:
        return cached[1]
    from prefect.client.orchestration import get_client

    try:
        async with get_client() as client:
            flow_run = await client.read_flow_run(flow_run_id)
    except Exception:  # the API being unreachable is not a cancellation
        return False
    state = flow_run.state
    flag = bool(state is not None and (state.is_cancelling() or state.is_cancelled()))
    with _flow_run_checks_lock:
        if len(_flow_run_checks) > 1024:
            _flow_run_checks.clear()
        _flow_run_checks[flow_run_id] = (now, flag)
    return flag


async def follow_job(
    handle: kc.JobHandle, logger: Any, *, log_interval: float, flow_run_id: UUID | None
) -> kc.JobState | None:
    """Wait until the job is terminal, forwarding logs every ``log_interval`` seconds.

    One waiter per job sits on the hub loop's shared poller for the whole wait (one
    bulk poll per interval for every job of the process). Returns None if the flow run
    is being cancelled while the job runs.
    """
    done = submit_to_hub(handle.await_done())
    waiter = asyncio.wrap_future(done)
    logs = LogForwarder(handle, logger)
    try:
        while True:
            finished, _ = await asyncio.wait({waiter}, timeout=log_interval)
            if finished:
                await logs.drain()
                return waiter.result()
            await logs.forward()
            if flow_run_id is not None and await flow_run_cancelling(flow_run_id, log_interval):
                return None
    finally:
        done.cancel()  # no-op when finished; otherwise unregisters the hub waiter


async def cancel_job(handle: kc.JobHandle, logger: Any, why: str) -> None:
    """Cancel the remote job, shielded from the cancellation that got us here."""
    try:
        with anyio.CancelScope(shield=True):
            cancelled = await asyncio.to_thread(handle.cancel)
    except Exception as exc:
        logger.error("Could not cancel Kinetic job %s (%s): %s", handle.job_id, why, exc)
        return
    if cancelled:
        logger.warning("Cancelled Kinetic job %s: %s.", handle.job_id, why)


def collect(handle: kc.JobHandle, keep_result: bool) -> Any:
    """The value, or the remote exception re-raised (always an Exception, so Prefect
    marks the run Failed and may retry, never Crashed)."""
    try:
        value = handle.result(cleanup=not keep_result)
    except Exception:
        raise
    except BaseException as exc:  # a remote SystemExit/KeyboardInterrupt is still a failure
        notes = "\n".join(getattr(exc, "__notes__", []) or [])
        raise kc.RemoteError(type(exc).__name__, str(exc), notes) from None
    if keep_result:
        # Free backend resources now; keep the result envelope so that a flow-run retry
        # reuses this succeeded job instead of running it again.
        handle.cleanup(storage=False)
    return value


async def attach_artifact(
    handle: kc.JobHandle, state: kc.JobState, reattached: bool, logger: Any
) -> None:
    try:
        markdown = await asyncio.to_thread(job_markdown, handle, state, reattached=reattached)
        await acreate_markdown_artifact(
            markdown, description=f"Kinetic job {handle.job_id}: {state.status.value}"
        )
    except Exception as exc:  # observability must not fail the task
        logger.warning("Could not create the artifact for job %s: %s", handle.job_id, exc)


# ---- the task body --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """What a kinetic task submits, and how it waits."""

    fn: Callable[..., Any]
    config: ConfigLike
    overrides: kc.Target
    cancel_on_cancel: bool
    log_interval: float
    job_name: str
    job_tags: dict[str, str]
    keep_result: bool

    def remote_callable(self) -> Callable[..., Any]:
        return run_coroutine_function(self.fn) if inspect.iscoroutinefunction(self.fn) else self.fn


def run_coroutine_function(fn: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
    """A plain callable that runs the async ``fn`` with ``asyncio.run`` on the remote side.

    Built as a closure so cloudpickle ships it by value (the remote side need not have
    kinetic_prefect installed).
    """

    def run_async_function(*args: Any, **kwargs: Any) -> Any:
        import asyncio as _asyncio

        return _asyncio.run(fn(*args, **kwargs))

    run_async_function.__qualname__ = run_async_function.__name__ = getattr(fn, "__name__", "fn")
    return run_async_function


async def run_job(spec: JobSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Submit (or reattach), wait, collect. Runs inside the Prefect task run."""
    ctx = TaskRunContext.get()
    logger: Any = get_run_logger() if ctx is not None else _log
    target = await resolve_target(spec.config, spec.overrides)
    key, identity_tags = task_run_identity(ctx, args, kwargs)
    started = time.time()
    handle = await asyncio.to_thread(
        kc.submit,
        spec.remote_callable(),
        args,
        kwargs,
        target=target,
        idempotency_key=key,
        name=spec.job_name,
        tags={**identity_tags, **spec.job_tags},
        reuse_succeeded=spec.keep_result,
    )
    reattached = handle.created_at < started
    logger.info(
        "Kinetic job %s (attempt %d) %s on backend %r; state in %s",
        handle.job_id,
        handle.attempt,
        "reattached" if reattached else "submitted",
        target.backend,
        handle.location,
    )
    flow_run_id = ctx.task_run.flow_run_id if ctx is not None else None
    try:
        state = await follow_job(
            handle, logger, log_interval=spec.log_interval, flow_run_id=flow_run_id
        )
    except BaseException as exc:
        # Cancellation (flow run cancelled, task timeout, termination signal) ends the
        # job too; an ordinary error while waiting leaves it for the retry to reattach.
        if spec.cancel_on_cancel and not isinstance(exc, Exception | GeneratorExit):
            await cancel_job(handle, logger, f"the task run was interrupted ({type(exc).__name__})")
        raise
    if state is None:  # the flow run is being cancelled
        if spec.cancel_on_cancel:
            await cancel_job(handle, logger, "the flow run was cancelled")
        current = await asyncio.to_thread(handle.state)
        await attach_artifact(handle, current, reattached, logger)
        return Cancelled(
            message=f"Flow run cancelled; Kinetic job {handle.job_id} is {current.status.value}."
        )
    logger.info(
        "Kinetic job %s finished: %s%s",
        handle.job_id,
        state.status.value,
        f" ({state.reason}: {state.message})" if state.reason else "",
    )
    await attach_artifact(handle, state, reattached, logger)
    if state.status is kc.JobStatus.CANCELLED:
        return Cancelled(message=f"Kinetic job {handle.job_id} was cancelled: {state.message}")
    return await asyncio.to_thread(collect, handle, spec.keep_result)


def make_body(spec: JobSpec) -> Callable[..., Coroutine[Any, Any, Any]]:
    """The async task function Prefect runs; it carries the user function's signature."""

    @functools.wraps(spec.fn)
    async def kinetic_job(*args: Any, **kwargs: Any) -> Any:
        return await run_job(spec, args, kwargs)

    kinetic_job.__kinetic_spec__ = spec  # type: ignore[attr-defined]
    return kinetic_job


def compose_retry_condition(
    user: Callable[..., Any] | None,
) -> Callable[[Task[..., Any], Any, State[Any]], Any]:
    """Never retry configuration or serialization errors; otherwise defer to ``user``."""

    def not_retryable(state: State[Any]) -> bool:
        return isinstance(state.data, NOT_RETRYABLE)

    if user is not None and inspect.iscoroutinefunction(user):

        async def kinetic_retry_condition_async(
            task: Task[..., Any], task_run: Any, state: State[Any]
        ) -> bool:
            return not not_retryable(state) and bool(await user(task, task_run, state))

        return kinetic_retry_condition_async

    def kinetic_retry_condition(task: Task[..., Any], task_run: Any, state: State[Any]) -> bool:
        if not_retryable(state):
            return False
        return True if user is None else bool(user(task, task_run, state))

    return kinetic_retry_condition


def in_async_context() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class KineticTask(Task[..., Any]):
    """A Prefect Task whose body runs as a Kinetic job.

    Calling it in an async flow returns an awaitable (``await train(x)``); in a sync flow
    it returns the value (``train(x)``). ``.submit()``/``.map()`` return Prefect futures.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        result = super().__call__(*args, **kwargs)
        if inspect.iscoroutine(result) and not in_async_context():
            return run_coro_as_sync(result)
        return result

    def with_options(self, *args: Any, **kwargs: Any) -> KineticTask:
        new = super().with_options(*args, **kwargs)
        new.__class__ = KineticTask
        return cast(KineticTask, new)

    @property
    def kinetic_spec(self) -> JobSpec:
        return cast(JobSpec, self.fn.__kinetic_spec__)  # type: ignore[attr-defined]


def check_callable(fn: Any) -> None:
    if not callable(fn):
        raise kc.SubmissionError(
            f"kinetic_task needs a function to run remotely, got {type(fn).__name__}: {fn!r}."
        )
    if isinstance(fn, Task):
        raise kc.SubmissionError(
            f"{fn.name!r} is already a Prefect task; apply @kinetic_task to the plain function."
        )
    try:
        cloudpickle.dumps(fn)
    except Exception as exc:
        raise kc.SerializationError(
            f"Cannot serialize {getattr(fn, '__qualname__', fn)!r} to run it remotely: "
            f"{type(exc).__name__}: {exc}. Define it at module level and avoid capturing "
            "locks, sockets, clients or open files in its closure."
        ) from exc


def kinetic_task(
    fn: Callable[..., Any] | None = None,
    *,
    config: ConfigLike = None,
    target: kc.Target | dict[str, Any] | None = None,
    cancel_on_cancel: bool = True,
    log_interval: float = 5.0,
    job_name: str | None = None,
    job_tags: dict[str, str] | None = None,
    keep_result: bool = True,
    **options: Any,
) -> Any:
    """Decorator: ``@kinetic_task`` or ``@kinetic_task(accelerator=..., retries=2, config=...)``.

    Keyword arguments that name ``kinetic_core.Target`` fields (accelerator, backend,
    storage, namespace, image, life_span, ...) configure the job; every other keyword
    goes to ``prefect.Task`` (name, tags, retries, retry_delay_seconds, timeout_seconds,
    cache_policy, persist_result, log_prints...). ``config`` is a saved KineticConfig
    block name, a KineticConfig, a Target/dict, or None (env and defaults).

    ``keep_result=True`` keeps the succeeded job's result envelope in storage so a
    flow-run retry reuses it instead of running the job again; backend resources are
    freed either way. ``cancel_on_cancel`` cancels the remote job when the task run is
    cancelled or times out.
    """
    target_fields = {k: options.pop(k) for k in list(options) if k in TARGET_FIELDS}
    overrides = kc.Target.coerce(target).merge(kc.Target.from_dict(target_fields))
    overrides.validate()
    checked_config = check_config(config)
    if (
        not isinstance(log_interval, int | float)
        or isinstance(log_interval, bool)
        or log_interval <= 0
    ):
        raise kc.ConfigError(
            f"log_interval must be a positive number of seconds, got {log_interval!r}."
        )
    if job_tags is not None and not (
        isinstance(job_tags, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in job_tags.items())
    ):
        raise kc.ConfigError(f"job_tags must be a dict of str to str, got {job_tags!r}.")

    def decorate(f: Callable[..., Any]) -> KineticTask:
        check_callable(f)
        spec = JobSpec(
            fn=f,
            config=checked_config,
            overrides=overrides,
            cancel_on_cancel=bool(cancel_on_cancel),
            log_interval=float(log_interval),
            job_name=job_name or getattr(f, "__qualname__", None) or "job",
            job_tags=dict(job_tags or {}),
            keep_result=bool(keep_result),
        )
        task_options = dict(options)
        task_options.setdefault("name", getattr(f, "__name__", None))
        task_options["retry_condition_fn"] = compose_retry_condition(
            task_options.get("retry_condition_fn")
        )
        return KineticTask(fn=make_body(spec), **task_options)

    if fn is not None:
        return decorate(fn)
    return decorate
