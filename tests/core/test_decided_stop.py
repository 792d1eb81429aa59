"""A running job whose outcome was decided in storage stops itself, with no signal from
outside (``runtime/decided_stop.py``): the channel a cancel has left when the backend can
no longer reach the job's processes (Slurm's forgotten job on a dead slurmd, a pod on a
partitioned node). On real local jobs, the decision is written and nothing is signalled."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.control.polling import poll_ticks
from kinetic_core.records import layout
from kinetic_core.records.lifecycle import decide, workers_left
from kinetic_core.runtime import decided_stop, signals
from kinetic_core.storage import open_storage
from kinetic_core.util.procs import process_alive
from tests.core import signalfns


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner reads storage every 0.2 s and kills 1 s after its SIGTERM."""
    monkeypatch.setenv(signals.POLL_ENV, "0.2")
    monkeypatch.setenv(decided_stop.GRACE_ENV, "1")


def until(check: Callable[[], object], what: str, timeout: float = 60) -> None:
    for _ in poll_ticks(interval=0.1, timeout=timeout, describe=lambda: what):
        if check():
            return


def _started(path: Path) -> tuple[int, int]:
    until(lambda: path.exists() and path.read_text().strip(), "the job's function to start")
    runner, child = path.read_text().split()[:2]
    return int(runner), int(child)


def _decide(storage_uri: str, job: kc.JobHandle, by: str) -> None:
    won, _ = decide(open_storage(storage_uri), job.job_id, "CANCELLED", "Cancelled", "test", by=by)
    assert won


@pytest.mark.parametrize("by", ["cancel", "status"])
def test_a_job_decided_stopped_in_storage_stops_itself(
    storage_uri: str, tmp_path: Path, by: str
) -> None:
    """Only the outcome is written (as cancel() or a sealing status resolution writes it):
    the runner reads it, its SIGTERM interrupts the function's blocking wait, the
    preemption callback runs, and every process of the job ends."""
    marks = tmp_path / "marks.txt"
    job = kc.submit(signalfns.hold_with_child, (str(marks),))
    runner, child = _started(marks)
    assert workers_left(open_storage(storage_uri), job.job_id) == [0]
    _decide(storage_uri, job, by)
    until(
        lambda: not process_alive(runner) and not process_alive(child),
        f"runner {runner} and child {child} to stop",
    )
    assert "stopping" in marks.read_text().splitlines()
    assert job.state().status is kc.JobStatus.CANCELLED
    assert f"was decided CANCELLED (Cancelled, by {by}" in job.logs()
    storage = open_storage(storage_uri)  # what a backend blind to the processes reads
    assert storage.exists(layout.job_file(job.job_id, layout.SELF_STOPPED.format(0)))
    assert workers_left(storage, job.job_id) == []


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace(
    storage_uri: str, tmp_path: Path
) -> None:
    marks = tmp_path / "marks.txt"
    job = kc.submit(signalfns.hold_with_child, (str(marks), True))
    runner, child = _started(marks)
    _decide(storage_uri, job, "cancel")
    until(
        lambda: not process_alive(runner) and not process_alive(child),
        f"runner {runner} and child {child} to be killed",
    )
    assert "still running after the kill grace: SIGKILL" in job.logs()
    assert workers_left(open_storage(storage_uri), job.job_id) == []
    assert job.state().status is kc.JobStatus.CANCELLED


def test_an_outcome_decided_by_a_runner_stops_nothing(storage_uri: str, tmp_path: Path) -> None:
    """A runner's outcome (another worker's, in a multi-host job) is no stop: the job runs
    on for its child's 4 s (20 ticks of its runner) and ends by itself."""
    marks = tmp_path / "marks.txt"
    job = kc.submit(signalfns.hold_with_child, (str(marks), False, 4.0))
    runner, child = _started(marks)
    _decide(storage_uri, job, "runner")
    until(lambda: not process_alive(child), f"child {child} to end by itself")
    assert "stopping" not in marks.read_text().splitlines()
    until(lambda: not process_alive(runner), f"runner {runner} to end by itself")
    assert "was decided" not in job.logs()
    assert workers_left(open_storage(storage_uri), job.job_id) == []  # finished.json
