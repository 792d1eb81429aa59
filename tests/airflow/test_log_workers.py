"""The ``log_workers`` option: worker 0's log by default, one worker or every worker's
(prefixed ``[wK]``) on a multi-host job; a single-host job's task log is unchanged."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from kinetic_airflow import KineticJobTrigger, KineticOperator

import kinetic_core as kc
from tests.core.slice_runs import COUNT, lines_of, register, run_slice


def test_single_host_task_logs_are_unprefixed_whatever_log_workers_says(
    dagbag: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    dr = dagbag.get_dag("kt_log_workers").test()
    assert dr.state == "success"
    out = "".join(capfd.readouterr())
    for word in ("all", "default", "decorated"):  # streamed as before: `[job-id] line`
        assert f"] saying {word}" in out
    assert "[w0]" not in out


def test_a_bad_log_workers_is_refused_when_the_dag_is_parsed() -> None:
    with pytest.raises(kc.ConfigError, match="log_workers must be 'all' or a worker index"):
        KineticOperator(task_id="t", python_callable=print, log_workers="some")


async def _streamed(
    job: kc.JobHandle,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    **option: Any,
) -> list[str]:
    """The job's lines the trigger writes into the task log (``[job-id] line``): through
    stdlib logging on Airflow 3.0 (pytest's caplog), printed by structlog on later minors."""
    trigger = KineticJobTrigger(handle=job.to_json(), poll_interval=0.2, **option)
    _, kwargs = trigger.serialize()
    assert kwargs["log_workers"] == option.get("log_workers", 0)  # survives the triggerer
    capfd.readouterr()
    caplog.clear()
    event = (await anext(KineticJobTrigger(**kwargs).run())).payload
    assert event["status"] == "success"
    logged = re.compile(rf"\[{job.job_id}\] (.*?)(?: \[kinetic_airflow.*)?$")
    records = [r.getMessage() for r in caplog.records]
    printed = capfd.readouterr().out.splitlines()
    lines = [m.group(1) for m in map(logged.search, records) if m]
    return lines or [m.group(1) for m in map(logged.search, printed) if m]


async def test_the_trigger_streams_worker_0_one_worker_or_all(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    register(monkeypatch)
    job = run_slice(os.environ["KINETIC_STORAGE"], tmp_path)  # 4 real runners, 4 streams
    assert await _streamed(job, capfd, caplog) == lines_of(0)
    assert await _streamed(job, capfd, caplog, log_workers=2) == lines_of(2)
    every = await _streamed(job, capfd, caplog, log_workers="all")
    assert sorted(every) == sorted(f"[w{k}] {line}" for k in range(COUNT) for line in lines_of(k))
