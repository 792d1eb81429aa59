"""``@kinetic_task(log_workers=...)``: worker 0's log by default, one worker or every
worker's (prefixed ``[wK]``) on a multi-host job; a single-host job's run log unchanged."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import fns
import pytest
from helpers import flow_run_logs
from kinetic_prefect import kinetic_task
from kinetic_prefect.tasks import follow_job
from prefect import flow

import kinetic_core as kc
from tests.core.slice_runs import COUNT, lines_of, register, run_slice


class RunLog:
    """Where ``follow_job`` writes: the lines a run logger would get."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str, *args: Any) -> None:
        self.lines.append(message % args)

    warning = info


def test_a_single_host_jobs_run_log_is_unprefixed_with_log_workers_all() -> None:
    chatty = kinetic_task(fns.chatty, log_interval=0.2, log_workers="all")
    assert chatty.kinetic_spec.log_worker is None

    @flow
    def talking() -> int:
        return chatty(2, 0.0)

    state = talking(return_state=True)
    assert state.result() == 2
    (job,) = kc.list_jobs(name="chatty")
    logs = flow_run_logs(state.state_details.flow_run_id)
    forwarded = [m for m in logs if m.startswith(f"[{job.job_id}] ")]
    assert [m for m in forwarded if "remote line" in m] == [
        f"[{job.job_id}] remote line {i}" for i in range(2)
    ]


def test_log_workers_is_checked_at_decoration_and_defaults_to_worker_0() -> None:
    assert kinetic_task(fns.double).kinetic_spec.log_worker == 0
    assert kinetic_task(fns.double, log_workers=3).kinetic_spec.log_worker == 3
    with pytest.raises(kc.ConfigError, match="log_workers must be 'all' or a worker index"):
        kinetic_task(fns.double, log_workers=-1)


def test_the_run_log_gets_worker_0_one_worker_or_all(
    kinetic_storage: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    register(monkeypatch)
    job = run_slice(kinetic_storage, tmp_path)  # 4 real runners, 4 streams

    def forwarded(worker: int | None) -> list[str]:
        log = RunLog()
        state = asyncio.run(follow_job(job, log, log_interval=0.2, flow_run_id=None, worker=worker))
        assert state is not None and state.status is kc.JobStatus.SUCCEEDED
        prefix = f"[{job.job_id}] "
        return [line[len(prefix) :] for line in log.lines if line.startswith(prefix)]

    assert forwarded(kinetic_task(fns.double).kinetic_spec.log_worker) == lines_of(0)
    assert forwarded(2) == lines_of(2)
    every = forwarded(kinetic_task(fns.double, log_workers="all").kinetic_spec.log_worker)
    assert sorted(every) == sorted(f"[w{k}] {line}" for k in range(COUNT) for line in lines_of(k))
