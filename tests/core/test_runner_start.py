"""A fresh runner (what a pod or a Slurm node starts: ``python -m kinetic_core.runtime.runner``)
imports only what the job needs before its function runs (issue 37): not the sidecar's
signal and telemetry machinery, not the job index. Structural: which modules are loaded
when the function is called, not how long anything took (``bench/runner_start.py``
measures that)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.records import layout
from tests.core import jobfns, scripted_backend

ROOT = Path(__file__).resolve().parents[2]

#: Loaded only after the function started (the sidecar thread's first wake, or its stop()).
NOT_BEFORE_THE_FUNCTION = {
    "kinetic_core.runtime.signals",
    "kinetic_core.runtime.telemetry",
    "kinetic_core.records.job_index",
    "kinetic_core.storage.gcs",
}


def _run_fresh(storage_uri: str, job_id: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The job's runner as its pod runs it: a fresh interpreter, stdout a pipe."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("KINETIC_")}
    argv = ["-m", "kinetic_core.runtime.runner", "--storage", storage_uri, "--job-id", job_id]
    return subprocess.run(
        [sys.executable, *argv],
        env={**base, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("tee", ["1", "0"])
def test_a_fresh_runner_calls_the_function_before_loading_the_sidecars_machinery(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch, tee: str
) -> None:
    """Before: ``import kinetic_core.runtime.runner`` loaded signals, telemetry and the job
    index (~50 ms of a ~90 ms import) before the runner wrote ``started.json``."""
    scripted_backend.register(monkeypatch)
    job = kc.submit(jobfns.loaded_modules, target={"backend": scripted_backend.NAME})
    run = _run_fresh(storage_uri, job.job_id, KINETIC_LOG_TO_STORAGE=tee)
    assert run.returncode == 0, run.stderr
    loaded = set(job.result(timeout=60, cleanup=False))
    assert "kinetic_core.records.lifecycle" in loaded  # the runner (`__main__`) called it
    assert loaded & NOT_BEFORE_THE_FUNCTION == set()
    # The sidecar still ran: its stop() left the job's one telemetry sample.
    root = Path(storage_uri.removeprefix("file://"))
    assert (root / layout.telemetry_record(job.job_id)).is_file()
