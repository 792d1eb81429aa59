"""KineticBatchOperator with a detached batch: the worker slot is freed right after
staging, and the one batch trigger follows the batch, children's log lines included."""

from __future__ import annotations

import time
from typing import Any

import pytest
from helpers import make_context
from kinetic_airflow import KineticBatchOperator, KineticBatchTrigger
from kinetic_airflow.compat import TaskDeferred

import kinetic_core as kc

FAST = {"poll_interval": 0.3}


def noisy_square(x: int) -> int:
    for i in range(3):
        print(f"square {x} step {i}", flush=True)
    return x * x


def sleep_then(x: int) -> int:
    time.sleep(30)
    return x


def fails_on_three(x: int) -> int:
    if x == 3:
        raise ValueError("three is not allowed")
    time.sleep(0.5)
    return x


def defer(op: KineticBatchOperator, context: dict[str, Any]) -> KineticBatchTrigger:
    with pytest.raises(TaskDeferred) as info:
        op.execute(context)
    trigger = info.value.trigger
    assert isinstance(trigger, KineticBatchTrigger)
    return trigger


async def follow(trigger: KineticBatchTrigger) -> dict[str, Any]:
    event = await anext(trigger.run())
    return event.payload  # type: ignore[no-any-return]


def test_worker_slot_is_freed_right_after_staging_1000_inputs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """1,000 inputs, max_concurrency=8: the worker holds its slot only while staging (the
    measured time is reported, not asserted), then the batch runs without it."""
    op = KineticBatchOperator(
        task_id="t",
        python_callable=sleep_then,
        inputs=list(range(1000)),
        max_concurrency=8,
        target=FAST,
    )
    ctx = make_context()
    started = time.perf_counter()
    trigger = defer(op, ctx)
    held = time.perf_counter() - started
    batch = kc.attach_batch(ctx["ti"].xcoms["group_id"], target=FAST)
    try:
        assert batch.submission_complete  # every call is staged: the batch is registered
        # Children of 30 s each, 8 at a time: the batch would take over an hour; the worker
        # did not wait for it, and the batch goes on without it.
        assert kc.BatchProgress(batch.group_id, 1000, batch.status_counts()).finished == 0
        with capsys.disabled():
            print(f"\nKineticBatchOperator worker-held time, 1000 inputs: {held:.2f} s")
    finally:
        batch.cancel()
    assert trigger.log_lines_per_child == 20


async def test_trigger_follows_the_batch_and_streams_child_lines(
    capfd: pytest.CaptureFixture[str],
) -> None:
    op = KineticBatchOperator(
        task_id="t",
        python_callable=noisy_square,
        inputs=[1, 2, 3],
        max_concurrency=2,
        poll_interval=0.3,
        log_lines_per_child=2,
        target=FAST,
    )
    ctx = make_context()
    trigger = defer(op, ctx)
    event = await follow(trigger)
    assert event["status"] == "success"
    assert op.execute_complete(ctx, event) == [1, 4, 9]
    out = "".join(capfd.readouterr())
    for x in (1, 2, 3):
        index = x - 1
        # two lines at most per child per poll: the last ones, and a note of what was skipped
        assert f"[child {index}] square {x} step 2" in out
    assert "lines skipped" in out or all(
        f"[child {x - 1}] square {x} step 0" in out for x in (1, 2, 3)
    )


async def test_fail_fast_option_stops_the_batch(capfd: pytest.CaptureFixture[str]) -> None:
    op = KineticBatchOperator(
        task_id="t",
        python_callable=fails_on_three,
        inputs=list(range(12)),
        max_concurrency=2,
        poll_interval=0.3,
        fail_fast=True,
        target=FAST,
    )
    ctx = make_context()
    event = await follow(defer(op, ctx))
    assert event["status"] == "failed"
    batch = kc.attach_batch(event["group_id"], target=FAST)
    statuses = batch.statuses()
    assert statuses[3] == "FAILED"
    assert "CANCELLED" in statuses and "UNSUBMITTED" not in statuses
    assert statuses[-1] == "CANCELLED" and statuses.count("CANCELLED") >= 6, statuses
