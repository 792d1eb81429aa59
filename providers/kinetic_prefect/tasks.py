"""``@kinetic_task``: a real Prefect task whose function body runs remotely as a Kinetic job.

The task run is where the waiting happens: the body submits the call with an
idempotency key derived from the task run's identity (so Prefect retries and flow-run
retries reattach instead of launching duplicates), then waits on the process-wide
shared poller while forwarding the job's log lines to the run logger.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Coroutine
from typing import Any, cast
from uuid import UUID

from prefect import Task
from prefect.artifacts import acreate_markdown_artifact
from prefect.context import TaskRunContext
from prefect.logging import get_run_logger
from prefect.states import Cancelled

import kinetic_core as kc
from kinetic_prefect.artifacts import job_markdown
from kinetic_prefect.calling import for_caller
from kinetic_prefect.cancellation import cancel_remote, flow_run_cancelling
from kinetic_prefect.config import TARGET_FIELDS, ConfigLike, check_config, resolve_target
from kinetic_prefect.identity import task_run_identity
from kinetic_prefect.retries import compose_retry_condition
from kinetic_prefect.spec import JobSpec, check_callable

_log = logging.getLogger("kinetic_prefect")


# ---- waiting --------------------------------------------------------------------------------


async def follow_job(
    handle: kc.JobHandle,
    logger: Any,
    *,
    log_interval: float,
    flow_run_id: UUID | None,
    worker: int | None = 0,
) -> kc.JobState | None:
    """Wait until the job is terminal, forwarding its log lines to ``logger`` every
    ``log_interval`` seconds (the core's shared poller does the waiting): a multi-host
    job's ``worker`` (None: every worker's, prefixed). Returns None if the flow run is
    being cancelled while the job runs."""

    async def cancelling() -> bool:
        return flow_run_id is not None and await flow_run_cancelling(flow_run_id, log_interval)

    stream = handle.afollow_logs(
        interval=log_interval, until=cancelling, best_effort=True, worker=worker
    )
    async for line in stream:
        logger.info("[%s] %s", handle.job_id, line)
    if stream.error is not None:
        logger.warning("Cannot read the logs of job %s: %s", handle.job_id, stream.error)
    return None if stream.stopped else stream.state


async def collect(handle: kc.JobHandle, keep_result: bool) -> Any:
    """The value, or the remote exception re-raised (always an Exception, so Prefect
    marks the run Failed and may retry, never Crashed)."""
    try:
        value = await handle.aresult(cleanup=not keep_result)
    except Exception:
        raise
    except BaseException as exc:  # a remote SystemExit/KeyboardInterrupt is still a failure
        notes = "\n".join(getattr(exc, "__notes__", []) or [])
        raise kc.RemoteError(type(exc).__name__, str(exc), notes) from None
    if keep_result:
        # Free backend resources now; keep the result envelope so that a flow-run retry
        # reuses this succeeded job instead of running it again.
        await handle.acleanup(storage=False)
    return value


async def attach_artifact(handle: kc.JobHandle, state: kc.JobState, logger: Any) -> None:
    try:
        markdown = job_markdown(handle, state, await handle.ahistory())
        await acreate_markdown_artifact(
            markdown, description=f"Kinetic job {handle.job_id}: {state.status.value}"
        )
    except Exception as exc:  # observability must not fail the task
        logger.warning("Could not create the artifact for job %s: %s", handle.job_id, exc)


# ---- the task body --------------------------------------------------------------------------


async def run_job(spec: JobSpec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Submit (or reattach), wait, collect. Runs inside the Prefect task run."""
    ctx = TaskRunContext.get()
    logger: Any = get_run_logger() if ctx is not None else _log
    target = await resolve_target(spec.config, spec.overrides)
    key, identity_tags = task_run_identity(ctx, args, kwargs)
    handle = await kc.asubmit(
        spec.fn,
        args,
        kwargs,
        target=target,
        idempotency_key=key,
        name=spec.job_name,
        tags={**identity_tags, **spec.job_tags},
        reuse_succeeded=spec.keep_result,
    )
    logger.info(
        "Kinetic job %s (attempt %d) %s on backend %r; state in %s",
        handle.job_id,
        handle.attempt,
        "reattached" if handle.reattached else "submitted",
        target.backend,
        handle.location,
    )
    flow_run_id = ctx.task_run.flow_run_id if ctx is not None else None
    try:
        with kc.cancel_on_termination(handle, enabled=spec.cancel_on_cancel):
            state = await follow_job(
                handle,
                logger,
                log_interval=spec.log_interval,
                flow_run_id=flow_run_id,
                worker=spec.log_worker,
            )
    except BaseException as exc:
        # Cancellation (flow run cancelled, task timeout, termination signal) ends the
        # job too; an ordinary error while waiting leaves it for the retry to reattach.
        if spec.cancel_on_cancel and not isinstance(exc, Exception | GeneratorExit):
            await cancel_remote(
                handle, logger, f"the task run was interrupted ({type(exc).__name__})"
            )
        raise
    if state is None:  # the flow run is being cancelled
        if spec.cancel_on_cancel:
            await cancel_remote(handle, logger, "the flow run was cancelled")
        current = await handle.astate()
        await attach_artifact(handle, current, logger)
        return Cancelled(
            message=f"Flow run cancelled; Kinetic job {handle.job_id} is {current.status.value}."
        )
    logger.info(
        "Kinetic job %s finished: %s%s",
        handle.job_id,
        state.status.value,
        f" ({state.reason}: {state.message})" if state.reason else "",
    )
    if state.recoveries:  # no Prefect retry was used: the job recovered itself
        logger.info("Kinetic job %s %s", handle.job_id, state.recovery_note)
    await attach_artifact(handle, state, logger)
    if state.status is kc.JobStatus.CANCELLED:
        return Cancelled(message=f"Kinetic job {handle.job_id} was cancelled: {state.message}")
    return await collect(handle, spec.keep_result)


def make_body(spec: JobSpec) -> Callable[..., Coroutine[Any, Any, Any]]:
    """The async task function Prefect runs; it carries the user function's signature."""

    @functools.wraps(spec.fn)
    async def kinetic_job(*args: Any, **kwargs: Any) -> Any:
        return await run_job(spec, args, kwargs)

    kinetic_job.__kinetic_spec__ = spec  # type: ignore[attr-defined]
    return kinetic_job


class KineticTask(Task[..., Any]):
    """A Prefect Task whose body runs as a Kinetic job.

    Calling it in an async flow returns an awaitable (``await train(x)``); in a sync flow
    it returns the value (``train(x)``). ``.submit()``/``.map()`` return Prefect futures.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return for_caller(super().__call__(*args, **kwargs))

    def with_options(self, *args: Any, **kwargs: Any) -> KineticTask:
        new = super().with_options(*args, **kwargs)
        new.__class__ = KineticTask
        return cast(KineticTask, new)

    @property
    def kinetic_spec(self) -> JobSpec:
        return cast(JobSpec, self.fn.__kinetic_spec__)  # type: ignore[attr-defined]


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
    log_workers: int | str = 0,
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
    cancelled or times out. ``log_workers``: whose log a multi-host job shows in the run
    log, a worker index (default 0, the coordinator) or ``"all"`` (every worker's lines,
    prefixed ``[w3] ``).
    """
    log_worker = kc.log_workers_option(log_workers)
    target_fields = {k: options.pop(k) for k in list(options) if k in TARGET_FIELDS}
    overrides = kc.Target.coerce(target).merge(kc.Target.from_dict(target_fields))
    overrides.validate()
    checked_config = check_config(config)
    log_seconds = kc.positive_seconds(log_interval, "log_interval")
    if job_tags is not None and not (
        isinstance(job_tags, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in job_tags.items())
    ):
        raise kc.ConfigError(f"job_tags must be a dict of str to str, got {job_tags!r}.")

    def decorate(f: Callable[..., Any]) -> KineticTask:
        check_callable(f)
        kc.install_termination_handler()  # decoration usually happens in the main thread, where signals can be caught
        spec = JobSpec(
            fn=f,
            config=checked_config,
            overrides=overrides,
            cancel_on_cancel=bool(cancel_on_cancel),
            log_interval=log_seconds,
            job_name=job_name or getattr(f, "__qualname__", None) or "job",
            job_tags=dict(job_tags or {}),
            keep_result=bool(keep_result),
            log_worker=log_worker,
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
