"""The dashboard in a real browser: ``kinetic ui`` as a subprocess on 127.0.0.1 over a
storage root with real local jobs (and, for the usage page, a job on a multi-host TPU slice
whose workers the test runs: tests/ui/ui_with_slices.py), driven by headless Chromium
(tests/browser.py).

With ``KINETIC_SCREENSHOTS=docs/assets`` the test also writes the docs' screenshots
(``make screenshots``)."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.backends import BackendState
from kinetic_core.states import Reason
from tests.browser import browser_page, screenshot
from tests.cleanup import kill_leftovers
from tests.core import batch_helpers, jobfns, scripted_backend, slice_runs
from tests.ui import ui_with_slices, uifns
from tests.ui.serving import kinetic_ui

ROOT = Path(__file__).resolve().parents[2]
TICKS = 6
#: About how long the slice job's attempt 1 trains before its preemption (lost chip-hours)
#: and its attempt 2 trains to the end (useful chip-hours).
PREEMPTED_AFTER = 3.0
RESUMED_FOR = 5.0


@dataclass
class Dashboard:
    url: str
    target: kc.Target
    done: list[kc.JobHandle]
    batch: kc.BatchHandle


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[Dashboard]:
    """``kinetic ui`` over a root holding a succeeded job, a failed one and a batch."""
    root = tmp_path / "store"
    target = kc.Target(storage=f"file://{root}")
    log = tmp_path / "ui.log"
    try:
        done = [
            kc.submit(jobfns.add, (2, 3), name="train-resnet", target=target, tags={"team": "ml"}),
            kc.submit(jobfns.fail, ("learning rate too high",), name="evaluate", target=target),
        ]
        batch = kc.submit_map(batch_helpers.square_or_fail, [1, 7, 3], name="sweep", target=target)
        recovering = kc.Target(storage=target.storage, max_recoveries=1, recover_on_exit_codes=[75])
        recovered = kc.submit(
            uifns.preempted_training,
            (str(tmp_path / "marks"), 1.0, 1.0),
            name="pretrain",
            target=recovering,
            tags={"team": "research"},
        )
        recovered.wait(timeout=180)
        for job in done:
            job.wait(timeout=60)
        batch.wait(timeout=120)
        done.append(recovered)
        with kinetic_ui(target.storage or "", log) as url:
            yield Dashboard(url, target, done, batch)
    finally:
        kill_leftovers(root)


def test_jobs_page_and_a_running_jobs_live_logs(dashboard: Dashboard, tmp_path: Path) -> None:
    gate = tmp_path / "go"
    running = kc.submit(
        uifns.gated_ticks, (str(gate), TICKS, 0.4), name="fine-tune", target=dashboard.target
    )
    with browser_page() as page:
        page.goto(f"{dashboard.url}/")
        rows = page.locator("#jobs-table tr[data-job-id]")
        for job in [*dashboard.done, running]:
            rows.and_(page.locator(f'[data-job-id="{job.job_id}"]')).wait_for()
        ids = rows.evaluate_all("rows => rows.map(r => r.dataset.jobId)")
        assert {j.job_id for j in [*dashboard.done, running]} <= set(ids)
        # the batch is one row (its children and its driver are not), also once app.js
        # has redrawn the table from /api/jobs
        group = dashboard.batch.group_id
        batch_row = page.locator(f'#jobs-table tr[data-batch-id="{group}"]')
        page.wait_for_function(
            "() => document.querySelector('#jobs-table tbody').dataset.drawn === 'api'"
        )
        assert batch_row.count() == 1
        assert batch_row.locator(".progress .seg").count() == 2  # SUCCEEDED and FAILED
        members = {j.job_id for j in dashboard.batch.jobs if j is not None}
        drawn = set(rows.evaluate_all("rows => rows.map(r => r.dataset.jobId)"))
        assert not drawn & members and {"sweep", "batch-driver-sweep"}.isdisjoint(
            rows.evaluate_all("rows => rows.map(r => r.cells[1].textContent)")
        )
        screenshot(page, "jobs")

        page.check("#filters input[name=all]")
        page.click("#filters button[type=submit]")
        page.wait_for_url("**/?*all=1*")
        for member in members:
            page.locator(f'#jobs-table tr[data-job-id="{member}"]').wait_for()
        assert page.locator("#jobs-table tr[data-batch-id]").count() == 0
        page.goto(f"{dashboard.url}/")
        batch_row.locator("a").click()
        page.wait_for_url(f"**/batches/{group}")
        page.goto(f"{dashboard.url}/")

        page.click(f'#jobs-table tr[data-job-id="{running.job_id}"] a')
        page.wait_for_url(f"**/jobs/{running.job_id}")
        page.locator('#job-state[data-status="RUNNING"]').wait_for()
        page.locator("#logs", has_text="tick 0").wait_for()
        gate.write_text("go")  # the page is open on the running job: let it print the rest
        page.locator('#job-state[data-status="SUCCEEDED"]').wait_for()
        page.locator("#logs", has_text=f"tick {TICKS - 1}").wait_for()
        logs = page.inner_text("#logs").split()
        assert [w for w in logs if w.isdigit()] == [str(i) for i in range(TICKS)]
        assert page.locator("#timeline > *").count() > 0  # the timeline is drawn
        screenshot(page, "job")

        page.goto(f"{dashboard.url}/batches/{dashboard.batch.group_id}")
        page.locator("#batch-progress").wait_for()
        screenshot(page, "batch")

        page.goto(f"{dashboard.url}/usage")
        # the usage chart is drawn: bars where jobs record usage (JobHandle.usage), else
        # the chart's "no usage recorded" note
        drawn = "#usage-chart rect.bar" if hasattr(kc.JobHandle, "usage") else "#usage-chart > *"
        page.locator(drawn).first.wait_for(state="attached")  # a bar of 0 chip-hours is flat
        assert page.locator(drawn).count() > 0
        # local jobs use no chips: the chart shows their running hours
        assert page.locator("#usage-chart rect.bar.running_hours").count() > 0
        assert "All " in page.inner_text("#usage-covers")

        recovered = dashboard.done[-1]  # the recovered job: one page, both attempts
        page.goto(f"{dashboard.url}/jobs/{recovered.job_id}")
        page.locator('#logs[data-attempt="2"][data-done]').wait_for()
        page.locator('#timeline rect[data-attempt="2"]').first.wait_for()
        screenshot(page, "recovered")
    assert running.result(timeout=30) == TICKS


def test_usage_page_draws_useful_and_lost_chip_hours_of_a_recovered_slice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33, item 8: the usage page of a store with a recovered multi-host TPU slice job
    (attempt 1 preempted part-way, attempt 2 succeeded) draws its useful and its lost
    chip-hours (and is the docs' usage screenshot); a CPU-only job beside it adds running
    hours, no chip-hours."""
    ui_with_slices.register(monkeypatch)
    root = tmp_path / "store"
    storage = f"file://{root}"
    try:
        cpu = kc.submit(
            jobfns.sleep,
            (4.0,),  # a few seconds of running hours (the table shows 0.001)
            name="tokenize",
            target=kc.Target(storage=storage),
            tags={"team": "data"},
        )
        job = _recovered_slice(storage, tmp_path)
        cpu.wait(timeout=60)
        # the dashboard measures the attempts itself (the first reader of an ended one
        # records its usage): a kinetic ui that knows the slice's backend kind
        module = ui_with_slices.__name__
        with kinetic_ui(storage, tmp_path / "ui.log", module) as url, browser_page() as page:
            page.goto(f"{url}/usage")
            bars = {
                key: page.locator(f"#usage-chart rect.bar.{key}")
                for key in ("useful_chip_hours", "lost_chip_hours")
            }
            for key, bar in bars.items():
                bar.first.wait_for(state="attached")
                heights = bar.evaluate_all("rs => rs.map(r => Number(r.getAttribute('height')))")
                assert heights and max(heights) > 0, (key, heights)  # drawn, not flat
            assert page.locator("#usage-chart rect.bar.running_hours").count() == 0
            assert "All 2 jobs" in page.inner_text("#usage-covers")  # one row per job
            tags = page.inner_text("#usage-tags")
            assert "team=research" in tags and "team=data" in tags
            screenshot(page, "usage")
        usage = job.usage()
        assert [(a.attempt, a.status, a.reason, a.lost) for a in usage.attempts] == [
            (1, "FAILED", "Preempted", True),
            (2, "SUCCEEDED", None, False),
        ]
        for a in usage.attempts:  # what a tpu-v5e-16 slice uses: 4 hosts x 4 chips
            assert (a.accelerator, a.chips, a.hosts) == (slice_runs.SLICE, 16, 4)
        assert usage.lost_chip_hours > 0 and usage.useful_chip_hours > 0
    finally:
        kill_leftovers(root)


def _recovered_slice(storage: str, tmp_path: Path) -> kc.JobHandle:
    """A job on a 4-host ``tpu-v5e-16`` slice whose workers this test runs (the kind's
    backend runs nothing): attempt 1 trains until its workers get SIGTERM and the backend
    says Preempted (its chip-hours are lost); the recovery's attempt 2 runs to the end."""
    marks = tmp_path / "marks"
    target = kc.Target(
        storage=storage, backend=ui_with_slices.NAME, accelerator=slice_runs.SLICE, max_recoveries=1
    )
    job = kc.submit(
        uifns.slice_training,
        (str(marks), RESUMED_FOR),
        name="pretrain-llm",
        target=target,
        tags={"team": "research"},
    )
    started: list[subprocess.Popen[str]] = []
    try:
        first = _workers(storage, job.job_id, started)
        deadline = time.monotonic() + 120
        while len(list(marks.glob(f"{job.job_id}-*"))) < slice_runs.COUNT:  # all train
            assert time.monotonic() < deadline, [p.poll() for p in first]
            time.sleep(0.1)
        time.sleep(PREEMPTED_AFTER)
        for proc in first:  # the slice is preempted: each worker's pod gets SIGTERM
            proc.send_signal(signal.SIGTERM)
        ends = [slice_runs.finish(proc) for proc in first]
        assert [code for code, _ in ends] == [143] * slice_runs.COUNT, ends  # no result
        scripted_backend.ScriptedBackend.phases[job.job_id] = BackendState(
            "exited",
            exit_code=143,
            reason=Reason.PREEMPTED.value,
            message="the slice was preempted",
        )
        successor = job.state().job_id  # resolved: attempt 1 is Preempted, attempt 2 launched
        assert successor != job.job_id
        second = _workers(storage, successor, started)
        ends = [slice_runs.finish(proc) for proc in second]
        assert [code for code, _ in ends] == [0] * slice_runs.COUNT, ends
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
    assert job.result(timeout=60, cleanup=False) == "trained"
    return job


def _workers(
    storage: str, job_id: str, started: list[subprocess.Popen[str]]
) -> list[subprocess.Popen[str]]:
    """Each worker's runner of ``job_id``'s attempt, as its pod starts it (also noted in
    ``started``, to be killed if the test ends early)."""
    procs = []
    for k in range(slice_runs.COUNT):
        procs.append(slice_runs.start_worker(storage, job_id, k))
        started.append(procs[-1])
    return procs
