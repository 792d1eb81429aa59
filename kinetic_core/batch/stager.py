"""Registering a batch: stage every child's call in parallel, then start its driver.

Staging writes each child's call envelope (signed when a key is set) under its first
attempt's deterministic job id, create-only: a keyed resubmission stages only what is
missing. Once every call is durable the batch is marked registered and its detached
driver job is started (``driver.drive_batch``); nothing of the submitter is needed after.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kinetic_core.batch.driver import DRIVER_KEY, Driver, drive_batch, driver_target
from kinetic_core.batch.manifest import BatchRecords, child_job_id
from kinetic_core.config.target import Target
from kinetic_core.control.launching import check_launch, launch_spec
from kinetic_core.jobs.handle import JobHandle
from kinetic_core.jobs.submission import prepare, submit
from kinetic_core.records import layout
from kinetic_core.states import JobStatus
from kinetic_core.util.ids import keyed_id

STAGING_THREADS = 16


def stage_children(
    records: BatchRecords,
    fn: Callable[..., Any],
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]],
    target: Target,
    name: str,
) -> None:
    """Stage each call (in parallel; storage writes dominate) and mark the batch
    registered. A call that cannot be staged is recorded as that input's error."""

    failed_before = (
        set(records.submission_failures()) if records.marker(layout.SUBMISSION_COMPLETE) else set()
    )

    def stage(index: int) -> None:
        args, kwargs = calls[index]
        try:
            plan = prepare(fn, args, kwargs, target=target, name=name)
            plan.stage(child_job_id(records.group_id, index, 1))
        except FileExistsError:
            return  # staged by an earlier call with the same idempotency key
        except Exception as exc:
            records.save_error(index, exc)
            return
        if index in failed_before:
            records.clear_error(index)

    with ThreadPoolExecutor(min(STAGING_THREADS, len(calls))) as pool:
        list(pool.map(stage, range(len(calls))))
    records.set_marker(layout.SUBMISSION_COMPLETE)


def reopen_if_failed(records: BatchRecords) -> None:
    """A keyed resubmission of a batch that ended with failures (an orchestrator retry):
    open a new round, so failed children get new attempts (succeeded ones stay)."""
    step = Driver(records).step()
    if step.done and not step.cancelled:
        failed = any(s.status is not JobStatus.SUCCEEDED for s in step.states.values())
        if failed or step.failures:
            records.open_round(records.rounds() + 1)


def start_driver(records: BatchRecords, target: Target) -> JobHandle:
    """Start (or find running) the batch's detached driver job (one per round)."""
    return submit(
        drive_batch,
        (records.group_id, records.manifest["storage"]),
        target=driver_target(target.to_dict(), target.signing_key),
        idempotency_key=DRIVER_KEY.format(group_id=records.group_id, round=records.rounds()),
        name=f"batch-driver-{records.manifest['name']}"[:60],
        tags=_driver_tags(records.group_id),
    )


def check_driver(group_id: str, target: Target) -> None:
    """Refuse, before the batch writes anything, a target its driver job could not run
    with (on Kubernetes: a pod that gets no service-account token to reach the API)."""
    driver = driver_target(target.to_dict(), target.signing_key).resolve()
    job_id = keyed_id(DRIVER_KEY.format(group_id=group_id, round=0), 1)
    check_launch(launch_spec(job_id, driver.storage or "", driver, _driver_tags(group_id)))


def _driver_tags(group_id: str) -> dict[str, str]:
    return {"kinetic/batch-driver": group_id}


__all__ = ["check_driver", "reopen_if_failed", "stage_children", "start_driver"]
