"""The runner runs a job's function at most once, and never beside another attempt of it:
a second runner of one job id (a replaced pod, a duplicate start) refuses without ending
the job, and a stray start of an attempt that is superseded, or whose predecessor has not
ended, runs nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import kinetic_core as kc
from kinetic_core.control.polling import poll_ticks
from kinetic_core.records import layout
from kinetic_core.states import REFUSED_EXIT_CODE
from tests.core import jobfns

ROOT = Path(__file__).resolve().parents[2]


def _runner(storage_uri: str, job_id: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "kinetic_core.runtime.runner",
            "--storage",
            storage_uri,
            "--job-id",
            job_id,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def test_a_second_runner_refuses_and_leaves_the_first_run_to_end_the_job(
    storage_uri: str, tmp_path: Path
) -> None:
    """Before: the second runner decided FAILED/Lost while the first run was alive, so the
    job read Lost and its real result was thrown away."""
    ready, go = tmp_path / "ready", tmp_path / "go"
    job = kc.submit(jobfns.wait_for_file, (str(go), "value", str(ready)))
    for _ in poll_ticks(interval=0.05, timeout=60, describe=lambda: "the first run"):
        if ready.exists():
            break
    second = _runner(storage_uri, job.job_id)
    assert second.returncode == REFUSED_EXIT_CODE, second.stderr
    assert "more than once" in second.stderr
    assert job.state().status is kc.JobStatus.RUNNING
    go.write_text("")
    assert job.result(timeout=60) == "value"


def test_a_stray_start_of_a_superseded_or_premature_attempt_runs_nothing(
    storage_uri: str, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    job = kc.submit(jobfns.write_marker, (str(marker),), idempotency_key=f"k-{uuid.uuid4()}")
    job.wait(timeout=60)
    marker.unlink()
    root = Path(storage_uri[len("file://") :]) / "jobs"
    # A later attempt that recovers an attempt which has not ended: it must wait its turn.
    early = json.loads((root / job.job_id / layout.HANDLE).read_text())
    (root / job.job_id / layout.OUTCOME).rename(root / job.job_id / "outcome.moved")
    (root / job.job_id / layout.STARTED).unlink()
    handle = {**early, "recovered_from": "nothing-ended-yet-1"}
    (root / job.job_id / layout.HANDLE).write_text(json.dumps(handle))
    run = _runner(storage_uri, job.job_id)
    assert (run.returncode, marker.exists()) == (REFUSED_EXIT_CODE, False), run.stderr
    assert "has not ended" in run.stderr
    # An attempt whose successor was started already.
    (root / job.job_id / layout.HANDLE).write_text(json.dumps(early))
    (root / job.job_id / layout.SUPERSEDED).write_text(json.dumps({"job_id": job.job_id}))
    run = _runner(storage_uri, job.job_id)
    assert (run.returncode, marker.exists()) == (REFUSED_EXIT_CODE, False), run.stderr
    assert "later attempt" in run.stderr
