"""The Backend protocol's contract, run against every backend (``harnesses.HARNESSES``):
local, Kubernetes on the test cluster as a single-host Job and as a multi-host JobSet (a
gang of 2 workers), and Slurm (a future backend adds a harness in harnesses.py, not cases
here). On a gang, one launch is one execution (all its worker pods) and a run is a run of
worker 0.

What status.py, recovery and cancel rely on must hold on each: a job id is launched once,
whoever launches it and however often; poll sees a job while any of its processes or pods
lives, even when its top-level object (a supervisor, a Job) is gone; cancel stops all of
them; a transient error at launch is retried and stays transient; a launch whose answer
was lost is found, not repeated; logs read back and delete leaves nothing. Every fault is
real (signals, API objects deleted, a network path reset) and every case asserts that its
fault struck.
"""

from __future__ import annotations

import pytest

from kinetic_core.errors import BackendError, KineticError, SubmissionError
from kinetic_core.records.lifecycle import decide
from kinetic_core.states import Reason
from kinetic_core.util.ids import new_id
from tests.contract import contract_fns
from tests.contract.harness import ENDED, Harness, Held, until
from tests.contract.harnesses import WITH_LASTING_FAULT
from tests.racing import race

LIVE = ("pending", "running")


def _launch_held(harness: Harness) -> tuple[str, Held]:
    """Launch a ``hold`` job and wait until its function runs (and its child lives)."""
    held = harness.held()
    spec = harness.spec(contract_fns.hold, *held.args())
    harness.backend.launch(spec)
    held.wait_started()
    return spec.job_id, held


# ---- 1. launch is idempotent per job id ---------------------------------------------------


def test_launch_is_idempotent_per_job_id(harness: Harness) -> None:
    """Two threads launch one spec at once, then a third launch follows: one execution,
    one top-level object, and the function ran once."""
    held = harness.held()
    spec = harness.spec(contract_fns.hold, *held.args())
    assert race(2, lambda _: harness.backend.launch(spec)) == [None, None]
    harness.backend.launch(spec)
    held.wait_started()
    assert len(harness.executions(spec.job_id)) == 1, harness.executions(spec.job_id)
    assert len(harness.tops(spec.job_id)) == 1, harness.tops(spec.job_id)
    assert harness.state(spec.job_id).phase in LIVE
    held.let_go()
    state = harness.wait_ended(spec.job_id)
    assert (state.phase, state.exit_code) == ("exited", 0), state
    assert held.count() == 1, held.runs.read_text()


# ---- 2. poll sees processes/pods whose top-level object is gone ----------------------------


def test_poll_sees_the_job_while_its_processes_outlive_its_top_level_object(
    harness: Harness,
) -> None:
    """Kubernetes: the Job (JobSet) deleted with orphan propagation, its pods run on.
    Local: the supervisor SIGKILLed, the process its function started runs on. While it
    runs, the job is running (never not_found/gone/exited: that would let a successor
    start beside it); once it ends, poll says so."""
    job_id, held = _launch_held(harness)
    harness.orphan(job_id)
    assert harness.tops(job_id) == []
    alive_before = harness.executions(job_id)
    assert alive_before, "the orphaning fault must leave the job's processes running"
    state = harness.state(job_id)
    alive_after = harness.executions(job_id)
    assert alive_after, "the job's processes ended during the poll: the case proves nothing"
    assert state.phase == "running", (
        f"poll says {state.phase} ({state.message}) while {alive_after} of job {job_id} still run"
    )
    held.let_go()
    until(f"{job_id}'s processes to end", lambda: not harness.executions(job_id))
    state = harness.state(job_id)
    assert state.phase in ENDED, f"every process of {job_id} ended, yet poll says {state}"
    assert held.count() == 1


# ---- 3. cancel stops every process/pod and is confirmed ------------------------------------


@pytest.mark.parametrize("orphaned", [False, True], ids=["whole", "orphaned"])
def test_cancel_stops_every_process_of_the_job(harness: Harness, orphaned: bool) -> None:
    """After ``cancel`` returns, every execution of the job ends within a bounded wait,
    also one orphaned from its top-level object first; poll then says it is not running.

    The whole job is stopped by the backend's ``cancel`` alone. An orphaned one is
    cancelled as ``JobHandle.cancel`` does it: the decision in storage first, then the
    backend's stop. Where the backend cannot reach the orphan (Slurm: slurmctld forgot
    the job, its node's slurmd is down) the runner reads the decision and stops itself."""
    job_id, held = _launch_held(harness)
    if orphaned:
        harness.orphan(job_id)
        assert harness.executions(job_id), "the orphaning fault must leave processes running"
        won, _ = decide(
            harness.storage, job_id, "CANCELLED", Reason.CANCELLED, "contract", by="cancel"
        )
        assert won
    harness.backend.cancel(job_id)
    until(
        lambda: (
            f"every process/pod of {job_id} to stop after cancel "
            f"(alive: {harness.executions(job_id)})"
        ),
        lambda: not harness.executions(job_id),
        timeout=60,
    )
    state = harness.state(job_id)
    assert state.phase not in LIVE, f"cancelled and nothing of it alive, yet poll says {state}"
    assert not held.release.exists()  # it was stopped, not let go
    assert held.count() == 1


# ---- 4. a transient error during launch is retried, never final ----------------------------


def test_a_transient_launch_error_is_retried(harness: Harness) -> None:
    held = harness.held()
    spec = harness.spec(contract_fns.mark, str(held.runs))
    with harness.transient_launch_fault() as fault:
        harness.backend.launch(spec)
    assert fault.injected, f"the fault never struck: {fault.what}"
    state = harness.wait_ended(spec.job_id)
    assert (state.phase, state.exit_code) == ("exited", 0), state
    assert held.count() == 1


@pytest.mark.parametrize("harness", WITH_LASTING_FAULT, indirect=True)
def test_a_transient_fault_outlasting_the_retries_stays_transient(harness: Harness) -> None:
    """The launch gives up with a transient BackendError (the caller may launch again),
    never a SubmissionError (final: "nothing was submitted"); launching again once the
    fault passed runs the job once."""
    held = harness.held()
    spec = harness.spec(contract_fns.mark, str(held.runs))
    with harness.lasting_launch_fault() as fault, pytest.raises(KineticError) as raised:
        harness.backend.launch(spec)
    assert fault.injected, f"the fault never struck: {fault.what}"
    error = raised.value
    assert isinstance(error, BackendError) and not isinstance(error, SubmissionError), (
        f"a transient fault at launch ended as {type(error).__name__}: {error}"
    )
    assert error.transient, f"a transient fault at launch is not transient: {error}"
    harness.backend.launch(spec)
    state = harness.wait_ended(spec.job_id)
    assert (state.phase, state.exit_code) == ("exited", 0), state
    assert held.count() == 1


# ---- 5. a launch whose answer was lost is found, not duplicated ----------------------------


def test_a_launch_whose_answer_was_lost_is_found_not_duplicated(harness: Harness) -> None:
    held = harness.held()
    spec = harness.spec(contract_fns.hold, *held.args())
    with harness.lost_answer(spec) as fault:
        harness.backend.launch(spec)
    assert fault.injected == 1, f"the fault did not strike once: {fault.what}"
    held.wait_started()
    job_id = spec.job_id
    assert len(harness.tops(job_id)) == 1, harness.tops(job_id)
    assert len(harness.executions(job_id)) == 1, harness.executions(job_id)
    held.let_go()
    state = harness.wait_ended(job_id)
    assert (state.phase, state.exit_code) == ("exited", 0), state
    assert held.count() == 1, held.runs.read_text()


# ---- 6. logs and delete --------------------------------------------------------------------


def test_logs_read_back_and_delete_leaves_nothing(harness: Harness) -> None:
    spec = harness.spec(contract_fns.talk, 6)
    job_id = spec.job_id
    harness.backend.launch(spec)
    assert harness.wait_ended(job_id).phase == "exited"

    full = harness.backend.logs(job_id)
    said = [line for line in full.splitlines() if line.startswith("contract line")]
    assert said == [f"contract line {i}" for i in range(6)], full
    assert harness.backend.logs(job_id, tail=2).splitlines() == full.splitlines()[-2:]
    followed, cursor = "", None
    for _ in range(100):  # bounded: each read returns a chunk, then nothing new
        chunk, cursor = harness.backend.read_logs(job_id, cursor)
        if not chunk:
            break
        followed += chunk
    assert followed.splitlines() == full.splitlines()
    assert harness.backend.read_logs(job_id, cursor)[0] == ""  # the cursor stays at the end

    assert harness.records(job_id), "nothing to delete: the case proves nothing"
    harness.backend.delete(job_id)
    until(
        lambda: f"{job_id}'s backend records to go (left: {harness.records(job_id)})",
        lambda: not harness.records(job_id),
    )
    harness.backend.delete(job_id)  # twice is fine
    absent = new_id("absent")
    harness.backend.delete(absent)  # never launched is fine
    assert harness.state(job_id).phase == "not_found"
    assert harness.state(absent).phase == "not_found"
