"""One create-only outcome record decides how a job ends: cancel, deadlines, the runner.

Deterministic races use the scripted backend (a job that stays "running" as long as the
test wants) and the runner's real code for storing a result; the stress test races real
local jobs against ``cancel()``.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.backends import BackendState
from kinetic_core.control.polling import poll_ticks
from kinetic_core.records import layout, lifecycle
from kinetic_core.records.envelope import failure_body, success_body
from kinetic_core.runtime import runner
from kinetic_core.storage import open_storage
from tests.core import jobfns
from tests.core.scripted_backend import ScriptedBackend, register


@pytest.fixture
def scripted(storage_uri: str, monkeypatch: pytest.MonkeyPatch) -> type[ScriptedBackend]:
    return register(monkeypatch)


def _runner_finishes(job: kc.JobHandle, value: object) -> None:
    """What the runner does when the function returns: its real store step."""
    runner._store(open_storage(job.storage), job.job_id, success_body(value), None)


def _outcome(job: kc.JobHandle) -> dict[str, object]:
    import json

    return json.loads(
        open_storage(job.storage).read_bytes(layout.job_file(job.job_id, "outcome.json"))
    )


def test_cancel_after_the_runner_decided_is_false_and_the_job_stays_succeeded(
    scripted: type[ScriptedBackend],
) -> None:
    job = kc.submit(jobfns.add, (1, 2), target={"backend": "scripted"})
    _runner_finishes(job, 3)  # the process is still exiting: the backend says running
    assert job.cancel() is False
    scripted.phases[job.job_id] = BackendState("exited", exit_code=0, reason="Completed")
    state = job.state()
    assert state.status is kc.JobStatus.SUCCEEDED, state
    assert job.result(timeout=10, cleanup=False) == 3


def test_cancel_first_wins_over_a_runner_finishing_after_it(
    scripted: type[ScriptedBackend],
) -> None:
    job = kc.submit(jobfns.add, (1, 2), target={"backend": "scripted"})
    scripted.ignore_cancel.add(job.job_id)  # its processes take a while to stop
    assert job.cancel(wait=0) is True
    # From cancel's return on, every reader sees CANCELLED, even while processes stop.
    seen = kc.attach(job.job_id).state()
    assert (seen.status, seen.reason) == (kc.JobStatus.CANCELLED, "Cancelled"), seen
    assert seen.message == f"cancelled from {socket.gethostname()}"
    _runner_finishes(job, 3)  # the function returned just after the cancel: it lost
    assert job.state().status is kc.JobStatus.CANCELLED
    scripted.phases[job.job_id] = BackendState("exited", exit_code=0, reason="Completed")
    final = job.state()
    assert final.status is kc.JobStatus.CANCELLED and final.reason == "Cancelled", final
    with pytest.raises(kc.JobCancelled):
        job.result(timeout=10)


def test_two_stops_the_first_one_decides(scripted: type[ScriptedBackend]) -> None:
    """Two cancels that both saw the job running, then a deadline: the first decides."""
    job = kc.submit(jobfns.add, (1,), target={"backend": "scripted", "life_span": 5})
    scripted.ignore_cancel.add(job.job_id)
    storage = open_storage(job.storage)
    first = lifecycle.decide(storage, job.job_id, "CANCELLED", "Cancelled", "first", by="cancel")
    second = lifecycle.decide(storage, job.job_id, "CANCELLED", "Cancelled", "second", by="cancel")
    assert first == (True, None)
    assert second[0] is False and second[1] is not None and second[1]["message"] == "first"
    assert _outcome(job)["message"] == "first"
    # The job now runs past its life_span: the deadline must not replace the cancel.
    scripted.phases[job.job_id] = BackendState("running", started_at=time.time() - 3600)
    state = job.state()
    assert (state.status, state.message) == (kc.JobStatus.CANCELLED, "first"), state
    assert _outcome(job)["message"] == "first"
    # Already decided, but its processes still run: a repeated cancel() carries the stop
    # out again (issue 34), it does not just say False; the decided outcome stays.
    before = scripted.cancelled.count(job.job_id)
    assert job.cancel(wait=0) is True
    assert scripted.cancelled.count(job.job_id) == before + 1
    assert _outcome(job)["message"] == "first"
    scripted.phases[job.job_id] = BackendState("gone", message="deleted by cancel")
    assert job.cancel(wait=0) is False  # decided and stopped: nothing left to do


def test_cancel_of_a_job_still_being_submitted_runs_nothing(
    scripted: type[ScriptedBackend], tmp_path: Path
) -> None:
    """The runner finds the outcome decided and does not call the function."""
    marker = tmp_path / "ran"
    job = kc.submit(jobfns.write_marker, (str(marker),), target={"backend": "scripted"})
    assert job.cancel(wait=0) is True
    assert runner.run_job(job.storage, job.job_id) == 1
    assert not marker.exists()
    assert job.state().status is kc.JobStatus.CANCELLED


def test_life_span_is_enforced_by_the_client_when_the_backend_does_not(
    scripted: type[ScriptedBackend],
) -> None:
    job = kc.submit(jobfns.add, (1,), target={"backend": "scripted", "life_span": 5})
    scripted.phases[job.job_id] = BackendState("running", started_at=time.time() - 3600)
    final = job.state()
    assert scripted.cancelled == [job.job_id], "the job past its life_span was not stopped"
    assert final.status is kc.JobStatus.FAILED and final.reason == "DeadlineExceeded", final
    assert "life_span=5s" in (final.message or "")


def test_schedule_timeout_is_enforced_on_a_pending_job(scripted: type[ScriptedBackend]) -> None:
    job = kc.submit(jobfns.add, (1,), target={"backend": "scripted", "schedule_timeout": 60})
    scripted.phases[job.job_id] = BackendState(
        "pending", reason="Unschedulable", message="0/3 nodes are available"
    )
    assert job.state().status is kc.JobStatus.PENDING  # young: within schedule_timeout
    assert scripted.cancelled == []
    old = dataclasses.replace(job, created_at=time.time() - 3600)  # pending for an hour
    final = old.state()
    assert scripted.cancelled == [job.job_id], "the job pending too long was not stopped"
    again = job.state()  # every reader, from then on
    assert (again.status, again.reason, again.message) == (
        final.status,
        final.reason,
        final.message,
    )
    assert final.status is kc.JobStatus.FAILED and final.reason == "ScheduleTimeout", final
    assert "Unschedulable: 0/3 nodes are available" in (final.message or "")


def _wait_for(predicate: Callable[[], bool], what: str) -> None:
    for _ in poll_ticks(interval=0.05, timeout=60, describe=lambda: what):
        if predicate():
            return


def _read_until(job_id: str, seen: list[tuple[float, kc.JobState]], stop: threading.Event) -> None:
    """Another reader: attaches anew and records every state it sees, with the moment its
    read began (a read in flight as cancel() returns may still answer RUNNING), until told
    to stop."""
    other = kc.attach(job_id)
    while not stop.is_set():
        began = time.monotonic()
        seen.append((began, other.state()))


@pytest.mark.timeout(240)
def test_cancel_racing_real_jobs_that_finish_never_flips(storage_uri: str, tmp_path: Path) -> None:
    """Real local jobs finish as cancel() arrives. For every trial: cancel() returned True
    exactly when the job ended CANCELLED, and no reader ever saw a terminal state change
    or RUNNING without the Cancelling reason after a successful cancel."""
    trials = 24
    outcomes: list[tuple[bool, kc.JobStatus]] = []
    for trial in range(trials):
        gate = tmp_path / f"gate-{trial}"
        ready = tmp_path / f"ready-{trial}"
        job = kc.submit(jobfns.wait_for_file, (str(gate), trial, str(ready)))
        _wait_for(ready.exists, f"trial {trial}'s function to start")
        seen: list[tuple[float, kc.JobState]] = []
        stop = threading.Event()

        reader = threading.Thread(target=_read_until, args=(job.job_id, seen, stop))
        reader.start()
        gate.write_text("go")  # the function returns about now
        time.sleep(0.0005 * (trial % 8))  # vary which of the two arrives first
        returned = job.cancel()
        after = time.monotonic()
        final = job.wait(timeout=60)
        stop.set()
        reader.join()
        seen.append((time.monotonic(), job.state()))
        outcomes.append((returned, final.status))
        assert final.status in (kc.JobStatus.CANCELLED, kc.JobStatus.SUCCEEDED), final
        assert returned == (final.status is kc.JobStatus.CANCELLED), (returned, final)
        terminal = [s.status for _, s in seen if s.terminal]
        assert set(terminal) <= {final.status}, f"trial {trial}: the state flipped: {terminal}"
        if returned:  # every read begun once cancel() returned
            late = [s for began, s in seen if began > after]
            assert all(s.status is kc.JobStatus.CANCELLED for s in late), [
                (s.status, s.reason) for s in late
            ]
    assert len(outcomes) == trials


def test_a_runner_between_its_outcome_and_its_finished_record_shows_its_exit_code(
    scripted: type[ScriptedBackend],
) -> None:
    """The runner writes the result, the outcome, then ``finished.json``; a reader in
    between (the process still exiting: the backend says running) sees the outcome's
    exit code and end time, not a half-known end."""
    job = kc.submit(jobfns.add, (1, 2), target={"backend": "scripted"})
    body = failure_body(SystemExit(75), phase="run", traceback_text="")
    body["exit_code"] = 75
    runner._store(open_storage(job.storage), job.job_id, body, None)
    open_storage(job.storage).delete(layout.job_file(job.job_id, layout.FINISHED))
    state = job.state()
    assert (state.status, state.exit_code) == (kc.JobStatus.FAILED, 75), state
    assert state.finished_at is not None
