"""@kinetic_task against a real Prefect server and real detached local jobs."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import fns
import kinetic_prefect
import pytest
from helpers import eventually, flow_run_artifacts, flow_run_logs, task_runs
from kinetic_prefect import kinetic_task
from prefect import Task, flow
from prefect.client.orchestration import get_client
from prefect.states import Cancelling

import kinetic_core as kc

double = kinetic_task(fns.double, log_interval=0.3)


def jobs_named(name: str) -> list[kc.JobHandle]:
    return kc.list_jobs(name=name)


def test_is_a_real_prefect_task_in_sync_and_async_flows() -> None:
    assert isinstance(double, Task)

    @flow
    def sync_flow(x: int) -> int:
        return double(x)

    @flow
    async def async_flow(x: int) -> tuple[int, int, list[int]]:
        direct = await double(x)
        future = double.submit(x + 1)
        mapped = double.map([1, 2, 3])
        return direct, future.result(), [f.result() for f in mapped]

    assert sync_flow(3) == 6
    assert asyncio.run(async_flow(5)) == (10, 12, [2, 4, 6])
    assert len(jobs_named("double")) == 6
    assert all(s.status is kc.JobStatus.SUCCEEDED for s in kc.resolve_states(jobs_named("double")))


def test_an_async_function_runs_remotely_and_returns_its_value() -> None:
    square = kinetic_task(fns.async_square, log_interval=0.3)

    @flow
    def squares() -> int:
        return square(7)

    assert squares() == 49


def test_remote_failure_is_failed_with_remote_traceback() -> None:
    boom = kinetic_task(fns.boom, log_interval=0.3)

    @flow
    def failing() -> None:
        boom("kaboom 42")

    state = failing(return_state=True)
    assert state.is_failed()
    runs = task_runs(state.state_details.flow_run_id)
    assert [r.state.type.value for r in runs] == ["FAILED"]  # Failed, not Crashed
    exc = state.result(raise_on_failure=False)
    assert isinstance(exc, fns.BoomError) and "kaboom 42" in str(exc)
    logs = "\n".join(flow_run_logs(state.state_details.flow_run_id))
    assert "BoomError" in logs and "kaboom 42" in logs
    assert "def boom" in logs or "fns.py" in logs  # the remote traceback reached the run log


def test_retry_after_remote_failure_submits_attempt_2(tmp_path: Path) -> None:
    flaky = kinetic_task(fns.fail_first, retries=1, retry_delay_seconds=0, log_interval=0.3)

    @flow
    def retrying() -> str:
        return flaky(str(tmp_path / "marker"))

    assert retrying() == "ok on retry"
    jobs = jobs_named("fail_first")
    assert sorted(j.attempt for j in jobs) == [1, 2]
    assert len({j.idempotency_key for j in jobs}) == 1
    states = {j.attempt: j.state().status for j in jobs}
    assert states == {1: kc.JobStatus.FAILED, 2: kc.JobStatus.SUCCEEDED}


def test_retry_after_crash_between_submit_and_wait_reattaches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_follow = kinetic_prefect.tasks.follow_job
    calls: list[str] = []

    async def crash_once(handle: kc.JobHandle, *args: Any, **kwargs: Any) -> Any:
        calls.append(handle.job_id)
        if len(calls) == 1:
            raise RuntimeError("simulated crash after submit")
        return await real_follow(handle, *args, **kwargs)

    monkeypatch.setattr(kinetic_prefect.tasks, "follow_job", crash_once)
    counted = kinetic_task(fns.count_call, retries=1, retry_delay_seconds=0, log_interval=0.3)
    counter = tmp_path / "calls.txt"

    @flow
    def crashing() -> int:
        return counted(str(counter), 4)

    assert crashing() == 40
    assert len(calls) == 2 and calls[0] == calls[1]  # the retry reattached to the same job
    assert len(jobs_named("count_call")) == 1
    assert len(counter.read_text().splitlines()) == 1


def test_flow_run_retry_does_not_rerun_succeeded_job(tmp_path: Path) -> None:
    counted = kinetic_task(fns.count_call, log_interval=0.3)
    counter = tmp_path / "calls.txt"
    marker = tmp_path / "flow-failed-once"

    @flow(retries=1, retry_delay_seconds=0)
    def pipeline() -> int:
        value = counted(str(counter), 7)
        if not marker.exists():
            marker.write_text("x")
            raise RuntimeError("later step fails on the first flow attempt")
        return value

    assert pipeline() == 70
    assert len(jobs_named("count_call")) == 1
    assert len(counter.read_text().splitlines()) == 1  # the remote function ran once


def test_cancelling_the_flow_run_cancels_the_job() -> None:
    sleeper = kinetic_task(fns.sleepy, log_interval=0.3)
    result: dict[str, Any] = {}

    @flow
    async def long_flow() -> str:
        return await sleeper(120)

    thread = threading.Thread(
        target=lambda: result.update(state=asyncio.run(long_flow(return_state=True)))
    )
    thread.start()
    job = eventually(lambda: jobs_named("sleepy"), what="the job to be submitted")[0]
    eventually(lambda: job.status() is kc.JobStatus.RUNNING, what="the job to run")

    async def cancel() -> None:
        async with get_client() as client:
            await client.set_flow_run_state(job.tags["prefect-flow-run"], Cancelling(), force=True)

    asyncio.run(cancel())
    thread.join(60)
    assert not thread.is_alive()
    assert job.state().status is kc.JobStatus.CANCELLED
    runs = task_runs(result["state"].state_details.flow_run_id)
    assert [r.state.type.value for r in runs] == ["CANCELLED"]


def test_task_timeout_cancels_the_job() -> None:
    sleeper = kinetic_task(fns.sleepy, timeout_seconds=2, log_interval=0.3)

    @flow
    async def timing_out() -> str:
        return await sleeper(120)

    state = asyncio.run(timing_out(return_state=True))
    assert state.is_failed()
    runs = task_runs(state.state_details.flow_run_id)
    assert runs[0].state.name == "TimedOut"
    (job,) = jobs_named("sleepy")
    assert job.state().status is kc.JobStatus.CANCELLED


def test_remote_logs_forwarded_incrementally_and_job_artifact() -> None:
    chatty = kinetic_task(fns.chatty, log_interval=0.2)

    @flow
    def talking() -> int:
        return chatty(4, 0.4)

    state = talking(return_state=True)
    assert state.result() == 4
    flow_run_id = state.state_details.flow_run_id
    logs = flow_run_logs(flow_run_id)
    (job,) = jobs_named("chatty")
    forwarded = [m for m in logs if m.startswith(f"[{job.job_id}] remote line")]
    assert forwarded == [f"[{job.job_id}] remote line {i}" for i in range(4)]
    finished_at = next(i for i, m in enumerate(logs) if "finished: SUCCEEDED" in m)
    assert logs.index(forwarded[0]) < finished_at
    (artifact,) = [a for a in flow_run_artifacts(flow_run_id) if a.type == "markdown"]
    assert job.job_id in artifact.data and "SUCCEEDED" in artifact.data
    assert "State history" in artifact.data and "RUNNING" in artifact.data
    # what it used: a local job runs on no chips
    assert (
        "#### Usage" in artifact.data and "usage: 1 attempt on CPU only (0 chips)" in artifact.data
    )


def test_fifty_concurrent_tasks_share_one_poll_per_interval() -> None:
    n = 50
    nap = kinetic_task(fns.sleepy, log_interval=1.0)
    poller = kc.shared_poller()

    @flow
    async def fan_out(count: int) -> list[str]:
        # Jobs long enough (3 s) that all tasks wait at the same time.
        return await asyncio.gather(*[nap(3.0 + i / 1000) for i in range(count)])

    before = poller.polls
    assert len(asyncio.run(fan_out(1))) == 1
    alone = poller.polls - before  # what one task's wait costs on its own
    before = poller.polls
    assert len(asyncio.run(fan_out(n))) == n
    polls = poller.polls - before
    assert len(jobs_named("sleepy")) == n + 1
    # Polling per task would cost about n * alone bulk calls; one shared poller costs a
    # small multiple of a single wait, however many tasks wait.
    assert 0 < polls < n * alone / 4, (polls, alone)


def test_a_lost_job_recovers_with_one_success_and_no_retry_consumed(tmp_path: Path) -> None:
    lost = kinetic_task(fns.lost_once, max_recoveries=1, retries=0, log_interval=0.3)

    @flow
    def pipeline() -> str:
        return lost(str(tmp_path))

    state = pipeline(return_state=True)
    assert state.is_completed()
    assert state.result() == "resumed from step 5"
    (run,) = task_runs(state.state_details.flow_run_id)
    assert run.state.type.value == "COMPLETED" and run.run_count == 1  # no retry used
    (job,) = [j for j in jobs_named("lost_once") if j.recovered_from is None]
    final = job.state()
    assert (final.status, final.recoveries, final.attempt) == (kc.JobStatus.SUCCEEDED, 1, 2)
    assert len((tmp_path / "starts").read_text().splitlines()) == 2
    (artifact,) = [
        a for a in flow_run_artifacts(state.state_details.flow_run_id) if a.type == "markdown"
    ]
    assert "| recoveries | 1 (recovered 1x" in artifact.data
    assert "| 1 | FAILED |" in artifact.data and "Lost" in artifact.data
    # the usage table: the lost attempt marked lost, its successor not
    rows = [r for r in artifact.data.splitlines() if r.startswith(("| 1 | CPU", "| 2 | CPU"))]
    assert [r.startswith(f"| {n} | CPU only | 0 | 1 |") for n, r in enumerate(rows, 1)] == [
        True,
        True,
    ], rows
    assert rows[0].endswith("| 0.00 | FAILED (Lost) | yes |  |"), rows
    assert rows[1].endswith("| 0.00 | SUCCEEDED |  |  |"), rows
    assert "usage: 2 attempts on CPU only (0 chips)" in artifact.data
    logs = "\n".join(flow_run_logs(state.state_details.flow_run_id))
    assert "recovered 1x" in logs
