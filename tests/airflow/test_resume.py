"""In-process execute -> trigger -> resume: reattach, resubmit, restart, kill, timeouts."""

from __future__ import annotations

import asyncio
import importlib
import json
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from conftest import count_jobs
from helpers import FakeStore, make_context, retry_of
from kinetic_airflow import KineticJobError, KineticJobSensor, KineticJobTrigger, KineticOperator
from kinetic_airflow.compat import AirflowFailException, TaskDeferralTimeout, TaskDeferred
from kinetic_airflow.identity import STORE_DELIVERED, STORE_JOB_ID

import kinetic_core as kc

FAST = {"poll_interval": 0.5}


def sleep_then(value: Any, seconds: float) -> Any:
    time.sleep(seconds)
    return value


def fail_always() -> None:
    raise KeyError("remote-key-error")


def chatty(lines: int) -> int:
    for i in range(lines):
        print(f"progress line {i}", flush=True)
        time.sleep(0.05)
    return lines


def defer(op: KineticOperator, context: dict[str, Any]) -> KineticJobTrigger:
    with pytest.raises(TaskDeferred) as info:
        op.execute(context)
    trigger = info.value.trigger
    assert isinstance(trigger, KineticJobTrigger)
    return trigger


async def fire(trigger: Any) -> dict[str, Any]:
    event = await anext(trigger.run())
    return event.payload  # type: ignore[no-any-return]


async def test_crash_between_submit_and_defer_reattaches() -> None:
    op = KineticOperator(task_id="t", python_callable=sleep_then, op_args=[3, 1.0], target=FAST)
    store = FakeStore()
    ctx = make_context(store=store)
    before = count_jobs()
    first = defer(op, ctx)  # the worker "crashes" here: the deferral is lost
    assert count_jobs() == before + 1
    second = defer(op, retry_of(ctx))
    assert second.handle.job_id == first.handle.job_id
    assert store[STORE_JOB_ID] == first.handle.job_id
    # without task_state_store (Airflow < 3.3) the idempotency key alone reattaches
    third = defer(op, {**retry_of(retry_of(ctx)), "task_state_store": None})
    assert third.handle.job_id == first.handle.job_id
    assert count_jobs() == before + 1
    assert op.execute_complete(ctx, await fire(second)) == 3


async def test_retry_after_remote_failure_creates_attempt_2() -> None:
    op = KineticOperator(task_id="t", python_callable=fail_always, target=FAST, stream_logs=False)
    ctx = make_context(store=FakeStore())
    trigger = defer(op, ctx)
    event = await fire(trigger)
    assert event["status"] == "failed" and event["state"]["reason"] == "Error"
    with pytest.raises(KineticJobError, match="remote-key-error") as info:
        op.execute_complete(ctx, event)
    assert isinstance(info.value.__cause__, KeyError)
    assert "Traceback" in str(info.value)
    retry = defer(op, retry_of(ctx))
    assert retry.handle.attempt == 2
    assert retry.handle.job_id == trigger.handle.job_id[:-1] + "2"


async def test_trigger_round_trip_survives_triggerer_restart() -> None:
    op = KineticOperator(
        task_id="t", python_callable=sleep_then, op_args=[{"acc": 0.9}, 1.5], target=FAST
    )
    ctx = make_context()
    trigger = defer(op, ctx)
    classpath, kwargs = trigger.serialize()
    wire = json.dumps(kwargs)  # what the metadata DB stores
    assert "signing_key" not in wire
    running = asyncio.ensure_future(fire(trigger))
    await asyncio.sleep(0.3)
    running.cancel()  # the triggerer died; the job keeps running
    await asyncio.gather(running, return_exceptions=True)
    assert not trigger.handle.done()
    module, _, name = classpath.rpartition(".")
    fresh = getattr(importlib.import_module(module), name)(**json.loads(wire))
    event = await fire(fresh)
    assert event["status"] == "success"
    assert op.execute_complete(ctx, event) == {"acc": 0.9}


async def test_trigger_on_kill_cancels_the_job() -> None:
    op = KineticOperator(task_id="t", python_callable=sleep_then, op_args=[1, 60], target=FAST)
    ctx = make_context()
    trigger = defer(op, ctx)
    waiting = asyncio.ensure_future(fire(trigger))
    await asyncio.sleep(0.3)
    await trigger.on_kill()  # the triggerer calls this on mark failed/success or clear
    event = await asyncio.wait_for(waiting, 30)
    assert event["state"]["status"] == "CANCELLED"
    with pytest.raises(KineticJobError, match="CANCELLED"):
        op.execute_complete(ctx, event)


async def test_trigger_on_kill_respects_cancel_on_kill_false() -> None:
    op = KineticOperator(
        task_id="t", python_callable=sleep_then, op_args=[1, 60], target=FAST, cancel_on_kill=False
    )
    trigger = defer(op, make_context())
    await trigger.on_kill()
    assert trigger.handle.state().status is kc.JobStatus.RUNNING or not trigger.handle.done()
    trigger.handle.cancel()


def test_execution_timeout_bounds_the_deferral_and_cancels() -> None:
    from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason

    op = KineticOperator(
        task_id="t",
        python_callable=sleep_then,
        op_args=[1, 60],
        target=FAST,
        execution_timeout=timedelta(seconds=30),
    )
    ctx = make_context()
    with pytest.raises(TaskDeferred) as info:
        op.execute(ctx)
    assert timedelta(0) < info.value.timeout <= timedelta(seconds=30)
    job = info.value.trigger.handle
    with pytest.raises(TaskDeferralTimeout):
        op.resume_execution(TRIGGER_FAIL_REPR, {"error": TriggerFailureReason.TRIGGER_TIMEOUT}, ctx)
    assert job.wait(30).status is kc.JobStatus.CANCELLED


def test_on_kill_cancels_in_non_deferrable_mode() -> None:
    op = KineticOperator(
        task_id="t",
        python_callable=sleep_then,
        op_args=[1, 60],
        target=FAST,
        deferrable=False,
        stream_logs=False,
    )
    ctx = make_context()
    outcome: dict[str, Any] = {}

    def worker() -> None:
        try:
            op.execute(ctx)
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=worker)
    thread.start()
    while op._handle is None:  # test-side wait for submission, not product code
        time.sleep(0.05)
    op.on_kill()  # what Airflow calls on SIGTERM / execution_timeout
    thread.join(60)
    assert isinstance(outcome.get("error"), KineticJobError)
    assert op._handle.state().status is kc.JobStatus.CANCELLED


async def test_clearing_a_successful_task_runs_a_new_job() -> None:
    op = KineticOperator(
        task_id="t", python_callable=sleep_then, op_args=[5, 0.1], target=FAST, result="reference"
    )
    store = FakeStore()
    ctx = make_context(store=store)
    first = defer(op, ctx)
    ref = op.execute_complete(ctx, await fire(first))
    assert ref["job_id"] == first.handle.job_id == store[STORE_DELIVERED]
    cleared = defer(op, retry_of(ctx))  # same run, task cleared -> new try
    assert cleared.handle.job_id != first.handle.job_id
    assert op.execute_complete(ctx, await fire(cleared))["job_id"] == cleared.handle.job_id


async def test_logs_stream_into_the_task_log_while_deferred(
    capfd: pytest.CaptureFixture[str],
) -> None:
    op = KineticOperator(
        task_id="t", python_callable=chatty, op_args=[12], poll_interval=0.2, target=FAST
    )
    ctx = make_context()
    trigger = defer(op, ctx)
    event = await fire(trigger)
    assert op.execute_complete(ctx, event) == 12
    out = "".join(capfd.readouterr())
    for i in range(12):
        assert f"progress line {i}" in out
    assert event["log_cursor"]


async def test_200_triggers_share_one_poll_per_interval() -> None:
    jobs = [
        kc.submit(sleep_then, (i, 60), target={"poll_interval": 0.5}, name="fanin")
        for i in range(20)
    ]
    try:
        triggers = [
            KineticJobTrigger(handle=jobs[i % 20].to_json(), stream_logs=False) for i in range(200)
        ]
        poller = kc.shared_poller()
        start = poller.polls
        tasks = [asyncio.ensure_future(fire(t)) for t in triggers]
        await asyncio.sleep(3)
        assert not any(t.done() for t in tasks)
        polls = poller.polls - start
        # adaptive ramp (~10 polls) then one poll per 0.5 s for ALL 200 triggers; per-trigger
        # pollers would make >= 200 * that
        assert 1 <= polls <= 30, polls
        for job in jobs:
            job.cancel()
        events = await asyncio.wait_for(asyncio.gather(*tasks), 60)
        assert {e["state"]["status"] for e in events} == {"CANCELLED"}
    finally:
        for job in jobs:
            job.cancel()


# ---- bad input --------------------------------------------------------------------------


def test_bad_input_at_parse_time() -> None:
    with pytest.raises(ValueError, match="python_callable"):
        KineticOperator(task_id="a", python_callable=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="callable"):
        KineticOperator(task_id="b", python_callable=42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="result must be one of"):
        KineticOperator(task_id="c", python_callable=print, result="pointer")
    with pytest.raises(kc.ConfigError, match="Unknown target option"):
        KineticOperator(task_id="d", python_callable=print, target={"acclerator": "tpu"})
    with pytest.raises(kc.ConfigError, match="poll_interval"):
        KineticOperator(task_id="e", python_callable=print, poll_interval=0)
    with pytest.raises(kc.ConfigError, match="poll_interval"):
        KineticJobSensor(task_id="f", job_id="x", poll_interval=-1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"kinetic_conn_id": "no_such_conn"}, "no_such_conn"),
        ({"target": {"backend": "mainframe"}}, "Unknown backend"),
        ({"target": {"life_span": -5}}, "life_span"),
        ({"target": {"storage": "s3://bucket"}}, "Malformed storage URI"),
        ({"target": '{"spot": true, "bogus": 1}'}, "Unknown target option"),
    ],
)
def test_bad_input_at_execute_fails_before_submitting(kwargs: dict[str, Any], match: str) -> None:
    op = KineticOperator(task_id="t", python_callable=sleep_then, op_args=[1, 0], **kwargs)
    before = count_jobs()
    with pytest.raises(AirflowFailException, match=match):
        op.execute(make_context())
    assert count_jobs() == before


def test_unpicklable_callable_fails_before_submitting() -> None:
    lock = threading.Lock()

    def holds_lock() -> bool:
        return lock.locked()

    op = KineticOperator(task_id="t", python_callable=holds_lock)
    before = count_jobs()
    with pytest.raises(AirflowFailException, match="Cannot submit"):
        op.execute(make_context())
    assert count_jobs() == before


# ---- kill while deferred before Airflow 3.3 (no trigger on_kill) ------------------------


def before_3_3(monkeypatch: pytest.MonkeyPatch, state: str | Exception) -> None:
    """What 3.0-3.2 do: no on_kill call; the task's state comes from the triggerer's API
    client, which exists only inside a triggerer (replaced here by the state it returns)."""
    from kinetic_airflow import kill_check

    async def task_state(ti: Any) -> str:
        if isinstance(state, Exception):
            raise state
        return state

    monkeypatch.setattr(kill_check, "TRIGGER_ON_KILL", False)
    monkeypatch.setattr(kill_check, "task_state", task_state)


async def cancelled_while_waiting(trigger: KineticJobTrigger, ctx: dict[str, Any]) -> None:
    """The triggerer cancels the trigger's coroutine (kill, restart or redistribution)."""
    trigger.task_instance = ctx["ti"]  # type: ignore[attr-defined]
    waiting = asyncio.ensure_future(fire(trigger))
    await asyncio.sleep(0.3)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


@pytest.mark.parametrize("state", ["failed", "success", "none"])
async def test_before_3_3_a_user_kill_while_deferred_cancels_the_job(
    monkeypatch: pytest.MonkeyPatch, state: str
) -> None:
    before_3_3(monkeypatch, state)
    op = KineticOperator(task_id="t", python_callable=sleep_then, op_args=[1, 60], target=FAST)
    ctx = make_context()
    trigger = defer(op, ctx)
    await cancelled_while_waiting(trigger, ctx)
    assert trigger.handle.wait(30).status is kc.JobStatus.CANCELLED


@pytest.mark.parametrize("state", ["deferred", RuntimeError("supervisor gone")])
async def test_before_3_3_a_triggerer_restart_leaves_the_job_running(
    monkeypatch: pytest.MonkeyPatch, state: str | Exception, capfd: pytest.CaptureFixture[str]
) -> None:
    before_3_3(monkeypatch, state)
    op = KineticOperator(task_id="t", python_callable=sleep_then, op_args=[1, 60], target=FAST)
    ctx = make_context()
    trigger = defer(op, ctx)
    try:
        await cancelled_while_waiting(trigger, ctx)
        assert trigger.handle.state().status is kc.JobStatus.RUNNING
        out = "".join(capfd.readouterr())
        assert "keeps running" in out or "kinetic jobs cancel" in out
    finally:
        trigger.handle.cancel()


async def test_before_3_3_cancel_on_kill_false_never_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    before_3_3(monkeypatch, "failed")
    op = KineticOperator(
        task_id="t", python_callable=sleep_then, op_args=[1, 60], target=FAST, cancel_on_kill=False
    )
    ctx = make_context()
    trigger = defer(op, ctx)
    try:
        await cancelled_while_waiting(trigger, ctx)
        assert trigger.handle.state().status is kc.JobStatus.RUNNING
    finally:
        trigger.handle.cancel()
