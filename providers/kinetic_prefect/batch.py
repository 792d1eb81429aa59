"""``kinetic_map``: fan a function out as ONE Kinetic batch inside one Prefect task run.

The batch is keyed by the task run identity, so a Prefect retry (or a flow-run retry)
reattaches to the same batch and only submits children that are missing. While it runs,
a progress artifact shows the percentage and counts; at the end a table artifact lists
the failures.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from prefect import Task
from prefect.artifacts import (
    acreate_progress_artifact,
    acreate_table_artifact,
    aupdate_progress_artifact,
)
from prefect.cache_policies import NO_CACHE
from prefect.context import TaskRunContext
from prefect.logging import get_run_logger
from prefect.states import Cancelled

import kinetic_core as kc
from kinetic_prefect.artifacts import failure_rows
from kinetic_prefect.calling import for_caller
from kinetic_prefect.cancellation import cancel_remote, flow_run_cancelling
from kinetic_prefect.config import TARGET_FIELDS, ConfigLike, check_config, resolve_target
from kinetic_prefect.identity import task_run_identity
from kinetic_prefect.retries import compose_retry_condition
from kinetic_prefect.spec import JobSpec, check_callable
from kinetic_prefect.tasks import KineticTask

_log = logging.getLogger("kinetic_prefect")


@dataclasses.dataclass(frozen=True)
class MapOptions:
    inputs: list[Any]
    max_concurrency: int
    retries: int
    input_mode: str
    return_exceptions: bool
    progress_interval: float
    fail_fast: bool = False
    log_lines_per_child: int = 20


def _artifact_key(group_id: str, suffix: str = "") -> str:
    return f"kinetic-batch-{group_id}{suffix}"


async def _update_progress(progress: kc.BatchProgress, artifact_id: Any, logger: Any) -> None:
    try:
        await aupdate_progress_artifact(
            artifact_id, progress=100.0 * progress.fraction, description=progress.describe()
        )
    except Exception as exc:
        logger.warning(
            "Could not update the progress artifact of batch %s: %s", progress.group_id, exc
        )


async def run_map(spec: JobSpec, opts: MapOptions) -> Any:
    ctx = TaskRunContext.get()
    logger: Any = get_run_logger() if ctx is not None else _log
    target = await resolve_target(spec.config, spec.overrides)
    key, identity_tags = task_run_identity(ctx, (opts.inputs, opts.input_mode), {})
    batch = await kc.asubmit_map(
        spec.fn,
        opts.inputs,
        target=target,
        max_concurrency=opts.max_concurrency,
        retries=opts.retries,
        input_mode=opts.input_mode,
        name=spec.job_name,
        tags={**identity_tags, **spec.job_tags},
        idempotency_key=key,
        fail_fast=opts.fail_fast,
    )
    logger.info(
        "Kinetic batch %s: %d jobs of %s (state in %s)",
        batch.group_id,
        batch.total,
        spec.job_name,
        target.storage,
    )
    artifact_id = await acreate_progress_artifact(
        0.0,
        key=_artifact_key(batch.group_id),
        description=f"Kinetic batch {batch.group_id}: registered",
    )
    flow_run_id = ctx.task_run.flow_run_id if ctx is not None else None

    async def cancelling() -> bool:
        return flow_run_id is not None and await flow_run_cancelling(
            flow_run_id, opts.progress_interval
        )

    progress: kc.BatchProgress | None = None
    try:
        with kc.cancel_on_termination(batch, enabled=spec.cancel_on_cancel):
            tail = batch.log_tail(opts.log_lines_per_child)
            async for progress in batch.aprogress(every=opts.progress_interval, until=cancelling):
                for line in await tail.aread():  # children's lines, bounded per interval
                    logger.info("%s", line)
                await _update_progress(progress, artifact_id, logger)
                logger.info("Kinetic batch %s: %s", batch.group_id, progress.describe())
    except BaseException as exc:
        if spec.cancel_on_cancel and not isinstance(exc, Exception | GeneratorExit):
            await cancel_remote(
                batch, logger, f"the task run was interrupted ({type(exc).__name__})"
            )
        raise
    if progress is None or not progress.done:  # the flow run is being cancelled
        if spec.cancel_on_cancel:
            await cancel_remote(batch, logger, "the flow run was cancelled")
        return Cancelled(message=f"Flow run cancelled; Kinetic batch {batch.group_id} cancelled.")
    # The core's own BatchError (partial results, failures, reports) is raised as it came,
    # after the failures artifact and the cleanup below.
    error: kc.BatchError | None = None
    values: list[Any] = []
    try:
        values = await batch.aresults(return_exceptions=opts.return_exceptions, cleanup=False)
    except kc.BatchError as batch_error:
        error = batch_error
    failed = await batch.afailed_children()
    if failed:
        try:
            await acreate_table_artifact(
                table=failure_rows(failed),
                key=_artifact_key(batch.group_id, "-failures"),
                description=f"Kinetic batch {batch.group_id}: {len(failed)} of {batch.total} failed",
            )
        except Exception as exc:
            logger.warning(
                "Could not create the failures artifact of batch %s: %s", batch.group_id, exc
            )
    logger.info(
        "Kinetic batch %s finished: %d succeeded, %d failed",
        batch.group_id,
        batch.total - len(failed),
        len(failed),
    )
    # Free backend resources; results stay so a retry of this task run can read them again.
    await batch.acleanup(storage=not spec.keep_result)
    if error is not None:
        raise error
    return values


def kinetic_map(
    fn: KineticTask | Any,
    inputs: Any,
    *,
    max_concurrency: int = 64,
    retries: int = 0,
    input_mode: str = "auto",
    return_exceptions: bool = False,
    progress_interval: float = 5.0,
    fail_fast: bool = False,
    log_lines_per_child: int = 20,
    config: ConfigLike = None,
    target: kc.Target | dict[str, Any] | None = None,
    name: str | None = None,
    **options: Any,
) -> Any:
    """Run ``fn`` once per input as one Kinetic batch; results in input order.

    ``fn`` is a ``@kinetic_task`` (its config, target and Prefect retries/timeout are
    reused) or a plain function. Each input is a tuple (positional args), a dict
    (keyword args) or a single value (see ``input_mode``). ``retries`` retries failed
    children inside the batch; Prefect retries of the map task reattach to the same
    batch. Failures raise ``kinetic_core.BatchError`` with the partial results, unless
    ``return_exceptions=True`` puts each exception in its place. ``fail_fast=True``
    stops the batch once a child failed for good (the rest read CANCELLED). The
    children's log lines reach the run logger prefixed ``[child i]``, at most
    ``log_lines_per_child`` per child per ``progress_interval``.

    In an async flow ``await kinetic_map(...)``; in a sync flow it returns the list.
    """
    target_fields = {k: options.pop(k) for k in list(options) if k in TARGET_FIELDS}
    if isinstance(fn, KineticTask):
        base = fn.kinetic_spec
        task_options: dict[str, Any] = {
            "retries": fn.retries,
            "retry_delay_seconds": fn.retry_delay_seconds,
            "timeout_seconds": fn.timeout_seconds,
            "tags": set(fn.tags),
        }
        overrides = base.overrides.merge(kc.Target.coerce(target)).merge(
            kc.Target.from_dict(target_fields)
        )
        spec = dataclasses.replace(
            base,
            overrides=overrides,
            config=base.config if config is None else check_config(config),
        )
        default_name = fn.name
    else:
        if isinstance(fn, Task):
            raise kc.SubmissionError(
                f"{fn.name!r} is a plain Prefect task; pass a @kinetic_task or the plain function."
            )
        check_callable(fn)
        overrides = kc.Target.coerce(target).merge(kc.Target.from_dict(target_fields))
        spec = JobSpec(
            fn=fn,
            config=check_config(config),
            overrides=overrides,
            cancel_on_cancel=bool(options.pop("cancel_on_cancel", True)),
            log_interval=5.0,
            job_name=getattr(fn, "__qualname__", "job"),
            job_tags=dict(options.pop("job_tags", None) or {}),
            keep_result=bool(options.pop("keep_result", True)),
        )
        task_options = {}
        default_name = getattr(fn, "__name__", "job")
    spec.overrides.validate()
    if isinstance(inputs, str | bytes) or not hasattr(inputs, "__iter__"):
        raise kc.ConfigError(
            f"inputs must be a list with one item per job, got {type(inputs).__name__}."
        )
    items = list(inputs)
    if not items:
        raise kc.ConfigError("inputs must be a non-empty list (one item per child job).")
    progress_seconds = kc.positive_seconds(progress_interval, "progress_interval")
    opts = MapOptions(
        items,
        max_concurrency,
        retries,
        input_mode,
        bool(return_exceptions),
        progress_seconds,
        fail_fast,
        int(log_lines_per_child),
    )
    task_options.update(options)
    map_name = name or f"{default_name}-map"

    async def kinetic_map_body() -> Any:
        return await run_map(spec, opts)

    kinetic_map_body.__name__ = kinetic_map_body.__qualname__ = map_name.replace(".", "-")
    task_options["retry_condition_fn"] = compose_retry_condition(
        task_options.get("retry_condition_fn")
    )
    task_options.setdefault("cache_policy", NO_CACHE)
    map_task: Task[..., Any] = Task(fn=kinetic_map_body, name=map_name, **task_options)
    return for_caller(map_task())
