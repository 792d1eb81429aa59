"""A flow run in a real process of its own (as a worker starts one), stopped as workers stop it.

SIGTERM (a worker cancelling or shutting down) cancels the remote job; SIGKILL (a hard
kill, an OOM kill) leaves the job running, and re-running the flow run reattaches to it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import eventually
from prefect.settings import PREFECT_API_URL

import kinetic_core as kc

SCRIPT = Path(__file__).with_name("flow_process.py")


def start_flow_process(workdir: Path, *extra: str) -> subprocess.Popen[bytes]:
    """Run ``flow_process.py`` against this session's test server, in a process of its own."""
    env = dict(os.environ, PREFECT_API_URL=str(PREFECT_API_URL.value()))
    env["PYTHONPATH"] = os.pathsep.join([str(SCRIPT.parent), env.get("PYTHONPATH", "")])
    log = open(workdir / f"flow-process-{len(extra)}.log", "wb")  # noqa: SIM115
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), str(workdir / "flow-run-id"), *extra],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


def running_job(workdir: Path) -> tuple[kc.JobHandle, int]:
    """The job the flow process submitted, once its function runs, and its process id."""
    (job,) = eventually(lambda: kc.list_jobs(name="wait_for_release"), what="the job")
    pids = workdir / "pids"
    eventually(lambda: pids.exists() and pids.read_text().strip(), what="the job to start")
    return job, int(pids.read_text().split()[0])


def stop(proc: subprocess.Popen[bytes], sig: signal.Signals) -> int:
    proc.send_signal(sig)
    try:
        return proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.timeout(180)
def test_sigterm_to_the_flow_process_cancels_the_job(tmp_path: Path) -> None:
    proc = start_flow_process(tmp_path)
    job, pid = running_job(tmp_path)
    assert job.status() is kc.JobStatus.RUNNING
    stop(proc, signal.SIGTERM)
    eventually(lambda: job.state().status.terminal, what="the job to end")
    assert job.state().status is kc.JobStatus.CANCELLED
    eventually(lambda: not pid_alive(pid), timeout=30, what="the job's process to exit")
    assert not (tmp_path / "flow-run-id.result").exists()


@pytest.mark.timeout(240)
def test_sigkill_leaves_the_job_running_and_the_rerun_reattaches(tmp_path: Path) -> None:
    proc = start_flow_process(tmp_path)
    job, pid = running_job(tmp_path)
    assert stop(proc, signal.SIGKILL) == -signal.SIGKILL
    assert job.status() is kc.JobStatus.RUNNING and pid_alive(pid)  # the hard kill left it

    rerun = start_flow_process(tmp_path, (tmp_path / "flow-run-id").read_text())
    try:
        # The re-run reattaches: its log says so before the job is released.
        log = tmp_path / "flow-process-1.log"
        eventually(lambda: b"reattached" in log.read_bytes(), what="the re-run to reattach")
        (tmp_path / "release").write_text("go")
        assert rerun.wait(timeout=120) == 0, log.read_text()
    finally:
        if rerun.poll() is None:
            rerun.kill()
    assert (tmp_path / "flow-run-id.result").read_text() == "42"
    assert [j.job_id for j in kc.list_jobs(name="wait_for_release")] == [job.job_id]
    assert (tmp_path / "pids").read_text().split() == [str(pid)]  # the function ran once
    assert job.state().status is kc.JobStatus.SUCCEEDED
