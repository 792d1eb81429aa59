"""The dashboard inside Airflow's own UI, in a real browser: ``airflow api-server`` as a
subprocess on 127.0.0.1 (the session's AIRFLOW_HOME and metadata DB, every user an admin)
with the kinetic plugin, opened in headless Chromium (tests/browser.py). Runs on the newest
Airflow minor (``make test-airflow``); the plugin's auth and per-minor behaviour are in
tests/airflow/test_dashboard_plugin.py."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

import kinetic_core as kc
from tests.browser import browser_page, free_port, screenshot, serving
from tests.core import jobfns

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def api_server(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    log = tmp_path / "api-server.log"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
    }
    airflow = str(Path(sys.executable).parent / "airflow")
    argv = [airflow, "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    with serving(argv, env, log, port, "/api/v2/monitor/health", timeout=240) as url:
        yield url


def test_dashboard_inside_airflows_ui(api_server: str, dagbag: Any) -> None:
    from test_dag_runs import run, xcom

    standalone = kc.submit(jobfns.add, (1, 1), name="outside-airflow")
    dr, tis = run(dagbag, "kt_value")  # a DAG run whose task submitted a kinetic job
    ti = tis[("add", -1)]
    task_job = xcom(ti, "job_id")
    assert dr.state == "success" and task_job and standalone.wait(timeout=60)
    with browser_page() as page:
        page.goto(f"{api_server}/plugin/kinetic")  # the "Kinetic" entry of Airflow's nav
        frame = page.frame_locator('iframe[src^="/kinetic"]')
        for job_id in (standalone.job_id, task_job):
            frame.locator(f'#jobs-table tr[data-job-id="{job_id}"]').wait_for()
        screenshot(page, "airflow")

        # the task instance's "Kinetic job" tab: that task's jobs only
        run_id = quote(dr.run_id, safe="")
        page.goto(f"{api_server}/dags/kt_value/runs/{run_id}/tasks/add/plugin/kinetic-task-jobs")
        frame = page.frame_locator('iframe[src*="airflow-dag-id"]')
        frame.locator(f'#jobs-table tr[data-job-id="{task_job}"]').wait_for()
        rows = frame.locator("#jobs-table tr[data-job-id]")
        assert rows.evaluate_all("rows => rows.map(r => r.dataset.jobId)") == [task_job]
