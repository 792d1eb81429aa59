"""``kinetic_map``: fan a function out as ONE Kinetic batch inside one Prefect task run.

The batch is keyed by the task run identity, so a Prefect retry (or a flow-run retry)
reattaches to the same batch and only submits children that are missing. While it runs,
a progress artifact shows the percentage and counts; at the end a table artifact lists
the failures.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

import anyio
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
from kinetic_prefect.artifacts import done_count, failure_rows, progress_description
from kinetic_prefect.calling import for_caller
from kinetic_prefect.config import TARGET_FIELDS, ConfigLike, check_config, resolve_target
from kinetic_prefect.hub import submit_to_hub
from kinetic_prefect.identity import task_run_identity
from kinetic_prefect.retries import compose_retry_condition
from kinetic_prefect.spec import JobSpec, check_callable
from kinetic_prefect.tasks import KineticTask, flow_run_cancelling

_log = logging.getLogger("kinetic_prefect")


@dataclasses.dataclass(frozen=True)
class MapOptions:
    inputs: list[Any]
    max_concurrency: int
    retries: int
    input_mode: str
    return_exceptions: bool
    progress_interval: float


def _artifact_key(group_id: str, suffix: str = "") -> str:
    return f"kinetic-batch-{group_id}{suffix}"


async def _update_progress(batch: kc.BatchHandle, artifact_id: Any, logger: Any) -> dict[str, int]:
    counts = await asyncio.to_thread(batch.status_counts)
    done = done_count(counts) + counts.get("SUBMIT_FAILED", 0)
    try:
        await aupdate_progress_artifact(
            artifact_id,
            progress=100.0 * done / max(batch.total, 1),
            description=progress_description(counts, batch.total),
        )
    except Exception as exc:
        logger.warning(
            "Could not update the progress artifact of batch %s: %s", batch.group_id, exc
        )
    return counts


async def _cancel_batch(batch: kc.BatchHandle, logger: Any, why: str) -> None:
    try:
        with anyio.CancelScope(shield=True):
            await asyncio.to_thread(batch.cancel)
        logger.warning("Cancelled Kinetic batch %s: %s.", batch.group_id, why)
    except Exception as exc:
        logger.error("Could not cancel Kinetic batch %s (%s): %s", batch.group_id, why, exc)


async def run_map(spec: JobSpec, opts: MapOptions) -> Any:
    ctx = TaskRunContext.get()
    logger: Any = get_run_logger() if ctx is not None else _log
    target = await resolve_target(spec.config, spec.overrides)
    key, identity_tags = task_run_identity(ctx, (opts.inputs, opts.input_mode), {})
    batch = await asyncio.to_thread(
        kc.submit_map,
        spec.remote_callable(),
        opts.inputs,
        target=target,
        max_concurrency=opts.max_concurrency,
        retries=opts.retries,
        input_mode=opts.input_mode,
        name=spec.job_name,
        tags={**identity_tags, **spec.job_tags},
        idempotency_key=key,
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
        description=f"Kinetic batch {batch.group_id}: submitting",
    )
    results = submit_to_hub(batch.aresults(ordered=True, return_exceptions=True, cleanup=False))
    waiter = asyncio.wrap_future(results)
    flow_run_id = ctx.task_run.flow_run_id if ctx is not None else None
    try:
        while True:
            finished, _ = await asyncio.wait({waiter}, timeout=opts.progress_interval)
            counts = await _update_progress(batch, artifact_id, logger)
            if finished:
                break
            logger.info(
                "Kinetic batch %s: %s", batch.group_id, progress_description(counts, batch.total)
            )
            if flow_run_id is not None and await flow_run_cancelling(
                flow_run_id, opts.progress_interval
            ):
                results.cancel()
                if spec.cancel_on_cancel:
                    await _cancel_batch(batch, logger, "the flow run was cancelled")
                return Cancelled(
                    message=f"Flow run cancelled; Kinetic batch {batch.group_id} cancelled."
                )
    except BaseException as exc:
        results.cancel()
        if spec.cancel_on_cancel and not isinstance(exc, Exception | GeneratorExit):
            await _cancel_batch(
                batch, logger, f"the task run was interrupted ({type(exc).__name__})"
            )
        raise
    values: list[Any] = waiter.result()
    statuses = await asyncio.to_thread(batch.statuses)
    failed = [i for i, s in enumerate(statuses) if s != "SUCCEEDED"]
    if failed:
        rows = await asyncio.to_thread(failure_rows, batch)
        try:
            await acreate_table_artifact(
                table=rows,
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
    await asyncio.to_thread(batch.cleanup, storage=not spec.keep_result)
    if failed and not opts.return_exceptions:
        jobs = await asyncio.to_thread(lambda: batch.jobs)
        failed_set = set(failed)
        raise kc.BatchError(
            batch.group_id,
            failures=[j for i, j in enumerate(jobs) if i in failed_set and j is not None],
            partial_results=[None if i in failed_set else v for i, v in enumerate(values)],
            submission_failures=await asyncio.to_thread(lambda: batch.submission_failures),
            total=batch.total,
        )
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
    ``return_exceptions=True`` puts each exception in its place.

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
