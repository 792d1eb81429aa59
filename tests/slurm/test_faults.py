"""Real faults on the private cluster: the controller down for long, an outside scancel,
a job that stays pending, a job Slurm forgot (see docs/slurm.md, "What survives what")."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.backends.slurm import job_name
from kinetic_core.states import Reason
from tests.contract.harness import until
from tests.slurm import slurm_fns
from tests.slurm.cluster import NODES, SlurmCluster

#: Seconds slurmctld stays down: longer than a poll's retries, shorter than lost_grace.
OUTAGE_S = 40.0


def _runs(marker: Path) -> list[str]:
    return marker.read_text().split() if marker.exists() else []


@contextlib.contextmanager
def controller_down(cluster: SlurmCluster, seconds: float = OUTAGE_S) -> Iterator[None]:
    """slurmctld stopped now (it saves its state, as at a restart or a crash it recovers
    from) and started again ``seconds`` later, while the block runs."""
    cluster.stop("slurmctld")
    assert not cluster.controller_up(), "slurmctld still answers: the fault did not strike"
    restart = threading.Timer(seconds, cluster.start_controller)
    restart.start()
    try:
        yield
    finally:
        restart.join()
        if not cluster.controller_up():
            cluster.start_controller()


@pytest.mark.parametrize("seconds", [5, 35], ids=["ends-in-the-outage", "outlasts-lost-grace"])
def test_a_wait_rides_out_the_controller_down_for_40s(
    slurm_target: kc.Target, slurm_cluster: SlurmCluster, tmp_path: Path, seconds: float
) -> None:
    """The job ends while slurmctld is down; result() waits through the outage (every
    poll fails as transient) and returns the job's value once: no Lost, no second run.
    An outage is not a job Slurm forgot: a job still running after lost_grace (15 s) of
    it is not Lost (22.05's ``squeue --json`` exits 0 with an empty list and an error)."""
    marker = tmp_path / "runs.txt"
    target = slurm_target.merge({"lost_grace": 15, "max_recoveries": 1})
    handle = kc.submit(slurm_fns.mark_and_sleep, (str(marker), seconds), target=target)
    until("the job to run", lambda: _runs(marker))
    with controller_down(slurm_cluster):
        value = handle.result(timeout=300)
    assert value == _runs(marker)[0] and len(_runs(marker)) == 1, _runs(marker)
    state = handle.state()
    assert (state.status, state.recoveries) == (kc.JobStatus.SUCCEEDED, 0), state
    assert all(s.reason != Reason.LOST for s in handle.history()), handle.history()


def test_a_submit_rides_out_the_controller_down_for_40s(
    slurm_target: kc.Target, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """sbatch fails while slurmctld is down: the launch is retried (each try first asks
    Slurm whether an earlier one took effect) and the job runs once."""
    marker = tmp_path / "runs.txt"
    with controller_down(slurm_cluster):
        handle = kc.submit(slurm_fns.mark_and_sleep, (str(marker), 0), target=slurm_target)
        value = handle.result(timeout=300)
    assert [value] == _runs(marker), _runs(marker)
    assert handle.state().status is kc.JobStatus.SUCCEEDED
    names = slurm_cluster.run("squeue", "-h", "-t", "all", f"--name={job_name(handle.job_id)}")
    assert len(names.splitlines()) == 1, names


def test_a_scancel_from_outside_kinetic_ends_the_job_failed_cancelled_never_rerun(
    slurm_target: kc.Target, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """An admin's (or the user's own) scancel is a deliberate stop: the job ends FAILED,
    reason Cancelled, the message says it was cancelled outside kinetic; it is not
    recovered even with max_recoveries, and never read Lost."""
    marker = tmp_path / "runs.txt"
    target = slurm_target.merge({"max_recoveries": 1})
    handle = kc.submit(slurm_fns.mark_and_sleep, (str(marker), 600), target=target)
    until("the job to run", lambda: _runs(marker))
    slurm_cluster.run("scancel", _runs(marker)[0])
    state = handle.wait(timeout=120)
    assert (state.status, state.reason) == (kc.JobStatus.FAILED, Reason.CANCELLED), state
    assert "outside kinetic" in (state.message or ""), state
    assert state.recoveries == 0 and len(_runs(marker)) == 1, (state, _runs(marker))
    assert all(s.reason != Reason.LOST for s in handle.history()), handle.history()


@contextlib.contextmanager
def cluster_full(cluster: SlurmCluster) -> Iterator[str]:
    """A job of someone else's holds every node of the cluster (its Slurm id)."""
    blocker = cluster.run(
        "sbatch",
        "--parsable",
        f"-N{len(NODES)}",
        "--exclusive",
        "-o",
        "/dev/null",
        "--wrap",
        "sleep 600",
    ).strip()
    try:
        until(
            "the blocker to run",
            lambda: cluster.run("squeue", "-h", "-j", blocker, "-o", "%T").strip() == "RUNNING",
        )
        yield blocker
    finally:
        cluster.run("scancel", blocker, check=False)
        cluster.wait_nodes(NODES)


def test_pending_reasons_come_from_slurm(
    slurm_target: kc.Target, slurm_cluster: SlurmCluster
) -> None:
    """Waiting for nodes reads PENDING with Slurm's reason (Resources); held by a user,
    PENDING JobHeldUser."""
    with cluster_full(slurm_cluster):
        handle = kc.submit(slurm_fns.add, (1, 2), target=slurm_target)
        state = until(
            "the job to wait for Resources",
            lambda: (s := handle.state()).reason == "Resources" and s,
        )
        assert state.status is kc.JobStatus.PENDING and "Resources" in state.message, state
        ids = slurm_cluster.run(
            "squeue", "-h", f"--name={job_name(handle.job_id)}", "-o", "%i"
        ).split()
        slurm_cluster.run("scontrol", "uhold", *ids)
        state = until(
            "the job to read held",
            lambda: (s := handle.state()).reason == "JobHeldUser" and s,
        )
        assert state.status is kc.JobStatus.PENDING, state
        slurm_cluster.run("scontrol", "release", *ids)
    assert handle.result(timeout=120) == 3


def test_schedule_timeout_stops_a_job_that_stays_pending(
    slurm_target: kc.Target, slurm_cluster: SlurmCluster
) -> None:
    """Every node is taken: past schedule_timeout the job is decided FAILED
    ScheduleTimeout (Slurm's reason in the message) and nothing of it is left in squeue."""
    with cluster_full(slurm_cluster):
        target = slurm_target.merge({"schedule_timeout": 10})
        handle = kc.submit(slurm_fns.add, (1, 2), target=target)
        state = handle.wait(timeout=120)
        assert (state.status, state.reason) == (kc.JobStatus.FAILED, Reason.SCHEDULE_TIMEOUT), state
        assert "Resources" in (state.message or ""), state
        live = slurm_cluster.run("squeue", "-h", f"--name={job_name(handle.job_id)}", "-o", "%i %T")
        assert live.strip() == "", live


def test_a_job_slurm_forgot_that_never_decided_reads_lost_after_lost_grace(
    slurm_target: kc.Target, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """The job's node dies with its tasks (slurmd and every task SIGKILLed) and slurmctld
    restarts with its state lost: nothing recorded an end. The job reads RUNNING
    (NodeUnreachable: its node may come back) until lost_grace, then FAILED Lost."""
    marker = tmp_path / "runs.txt"
    target = slurm_target.merge({"lost_grace": 20})
    handle = kc.submit(slurm_fns.mark_and_sleep, (str(marker), 600), target=target)
    until("the job to run", lambda: _runs(marker))
    slurm_id = _runs(marker)[0]
    node = slurm_cluster.run("squeue", "-h", "-j", slurm_id, "-o", "%N").strip()
    slurm_cluster.stop_node(node)
    try:
        for pid in slurm_fns.alive_in(slurm_id):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        until(f"Slurm job {slurm_id}'s processes to die", lambda: not slurm_fns.alive_in(slurm_id))
        slurm_cluster.stop("slurmctld")
        slurm_cluster.start_controller(clear=True)
        state = handle.state()
        assert (state.status, state.reason) == (kc.JobStatus.RUNNING, Reason.NODE_UNREACHABLE), (
            state
        )
        state = handle.wait(timeout=120)
    finally:
        slurm_cluster.start_node(node)
        slurm_cluster.wait_nodes()
    assert (state.status, state.reason) == (kc.JobStatus.FAILED, Reason.LOST), state
    assert "lost_grace=20s" in (state.message or ""), state
    assert len(_runs(marker)) == 1
