"""Real processes, real signals: what happens when things die."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import kinetic_core as kc
from tests.core import jobfns

ROOT = Path(__file__).resolve().parents[2]


def _wait_for(predicate, what: str, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    """Bounded wait for an external condition (a file, a pid) with a clear failure."""
    for _ in kc_ticks(timeout):
        if predicate():
            return
    raise AssertionError(f"timed out waiting for {what}")


def kc_ticks(timeout: float):  # type: ignore[no-untyped-def]
    from kinetic_core.control.polling import poll_ticks

    try:
        yield from poll_ticks(interval=0.1, timeout=timeout, describe=lambda: "condition")
    except kc.WaitTimeout:
        return


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # reaped between the two lines: its /proc entry is gone (or going) too
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_submitter_killed_right_after_run_async_then_attach_from_new_process(
    storage_uri: str,
) -> None:
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        import kinetic_core as kc
        from tests.core import jobfns
        job = kc.submit(jobfns.sleep, (1.0, "survived"))
        print(job.job_id, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == -signal.SIGKILL
    job_id = proc.stdout.strip()
    reader = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        import kinetic_core as kc
        print(kc.attach({job_id!r}).result(timeout=60))
        """
    )
    out = subprocess.run([sys.executable, "-c", reader], capture_output=True, text=True, timeout=90)
    assert out.stdout.strip() == "survived", out.stderr


def test_runner_killed_with_sigkill_is_failed_with_signal_and_reason(
    storage_uri: str, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    job = kc.submit(jobfns.pid_then_sleep, (str(pid_file), 60))
    _wait_for(pid_file.exists, "the job to write its pid")
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    state = job.wait(timeout=30)
    assert state.status is kc.JobStatus.FAILED
    assert state.reason == "Killed"
    assert state.exit_code == 128 + signal.SIGKILL
    assert "SIGKILL" in (state.message or "")
    with pytest.raises(kc.JobFailed, match="Killed") as info:
        job.result(timeout=10)
    assert info.value.state is not None and info.value.state.exit_code == 137


def test_non_zero_exit_without_result(storage_uri: str) -> None:
    job = kc.submit(jobfns.exit_code, (3,))
    state = job.wait(timeout=30)
    assert state.status is kc.JobStatus.FAILED and state.exit_code == 3 and state.reason == "Error"


def test_supervisor_and_runner_vanish_is_lost(storage_uri: str, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    job = kc.submit(jobfns.pid_then_sleep, (str(pid_file), 60))
    _wait_for(pid_file.exists, "the job to write its pid")
    launch = json.loads(
        Path(storage_uri[7:], "backend-local", job.job_id, "launch.json").read_text()
    )
    os.killpg(launch["pid"], signal.SIGKILL)  # nobody is left to record an exit
    _wait_for(lambda: not _pid_alive(launch["pid"]), "the supervisor to die")
    state = job.wait(timeout=30)
    assert state.status is kc.JobStatus.FAILED
    assert state.reason == "Lost"
    assert "vanished" in (state.message or "")


def test_cancel_kills_process_group_and_reads_cancelled(storage_uri: str, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    job = kc.submit(jobfns.pid_then_sleep, (str(pid_file), 60))
    _wait_for(pid_file.exists, "the job to write its pid")
    runner_pid = int(pid_file.read_text())
    assert job.cancel() is True
    state = job.wait(timeout=30)
    assert state.status is kc.JobStatus.CANCELLED and state.reason == "Cancelled"
    _wait_for(lambda: not _pid_alive(runner_pid), "the runner process to exit")
    with pytest.raises(kc.JobCancelled):
        job.result(timeout=10)
    assert job.cancel() is False  # already finished: nothing to do
    # Another process sees the same durable state.
    assert kc.attach(job.job_id).status() is kc.JobStatus.CANCELLED


def test_life_span_exceeded_is_failed_deadline_exceeded(storage_uri: str, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    job = kc.submit(jobfns.pid_then_sleep, (str(pid_file), 600), target={"life_span": 1})
    _wait_for(pid_file.exists, "the job to write its pid")
    state = job.wait(timeout=60)
    assert state.status is kc.JobStatus.FAILED
    assert state.reason == "DeadlineExceeded"
    assert "life_span of 1s exceeded" in (state.message or "")  # the supervisor stopped it
    assert state.exit_code == 128 + signal.SIGTERM  # killed, not returned from its sleep
    # Once the state is terminal the runner is gone (checked at once, not waited for).
    assert not _pid_alive(int(pid_file.read_text()))


def test_cleanup_of_running_job_refuses_unless_told_to_cancel(
    storage_uri: str, tmp_path: Path
) -> None:
    """Issue 35 item 5: ``cleanup()`` of a running job cancelled it without a word."""
    pid_file = tmp_path / "pid"
    job = kc.submit(jobfns.pid_then_sleep, (str(pid_file), 60))
    _wait_for(pid_file.exists, "the job to write its pid")
    with pytest.raises(kc.JobStillRunning, match="cancel=True"):
        job.cleanup()
    assert job.status() is kc.JobStatus.RUNNING  # nothing was done
    assert _pid_alive(int(pid_file.read_text()))
    job.cleanup(cancel=True)
    _wait_for(lambda: not _pid_alive(int(pid_file.read_text())), "the runner to be killed")
    assert job.status() is kc.JobStatus.CANCELLED
