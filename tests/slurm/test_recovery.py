"""Preemption by a higher-priority partition and node failure, recovered exactly once."""

from __future__ import annotations

from pathlib import Path

import pytest

import kinetic_core as kc
from tests.contract.harness import until
from tests.slurm import slurm_fns
from tests.slurm.cluster import SlurmCluster


def _slurm_ids(marker: Path) -> list[str]:
    return marker.read_text().split() if marker.exists() else []


def test_a_preempted_spot_job_recovers_once_after_its_tasks_are_gone(
    slurm_target: kc.Target, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """A job filling the preemptible partition is preempted by an urgent one (Slurm ends
    it PREEMPTED: kinetic never lets Slurm requeue it); kinetic starts attempt 2 as a new
    Slurm job, which runs the function again and returns."""
    marker = tmp_path / "runs.txt"
    target = slurm_target.merge(
        {"partition": "spot", "num_hosts": 4, "sbatch_args": ["--exclusive"], "max_recoveries": 1}
    )
    handle = kc.submit(slurm_fns.second_time_lucky, (str(marker), 600), target=target)
    until("attempt 1 to run", lambda: _slurm_ids(marker))
    slurm_cluster.run(
        "sbatch",
        "--parsable",
        "-p",
        "urgent",
        "-N1",
        "--exclusive",
        "-o",
        "/dev/null",
        "--wrap",
        "sleep 2",
    )
    assert handle.result(timeout=240) == 2
    state = handle.state()
    assert (state.status, state.recoveries) == (kc.JobStatus.SUCCEEDED, 1), state
    first, second = _slurm_ids(marker)
    assert first != second  # attempt 2 is a new Slurm job, not Slurm's requeue of 1
    status = slurm_cluster.run("squeue", "-h", "-t", "all", "-j", first, "-o", "%T").strip()
    assert status == "PREEMPTED", status


def test_a_job_whose_node_fails_recovers_once(
    slurm_target: kc.Target, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """scontrol sets the job's node DOWN: Slurm ends the job NODE_FAIL, which reads Lost
    (recoverable); attempt 2 runs on another node."""
    marker = tmp_path / "runs.txt"
    target = slurm_target.merge({"max_recoveries": 1})
    handle = kc.submit(slurm_fns.second_time_lucky, (str(marker), 600), target=target)
    until("attempt 1 to run", lambda: _slurm_ids(marker))
    first = _slurm_ids(marker)[0]
    node = slurm_cluster.run("squeue", "-h", "-j", first, "-o", "%N").strip()
    slurm_cluster.run("scontrol", "update", f"nodename={node}", "state=down", "reason=test")
    try:
        assert handle.result(timeout=240) == 2
    finally:
        slurm_cluster.run("scontrol", "update", f"nodename={node}", "state=resume", check=False)
    state = handle.state()
    assert (state.status, state.recoveries) == (kc.JobStatus.SUCCEEDED, 1), state
    status = slurm_cluster.run("squeue", "-h", "-t", "all", "-j", first, "-o", "%T").strip()
    assert status == "NODE_FAIL", status


def _lines(marker: Path) -> list[list[str]]:
    return [line.split() for line in marker.read_text().splitlines()] if marker.exists() else []


@pytest.mark.parametrize("fault", ["node-down", "slurmd-killed"])
def test_a_multi_node_job_whose_node_fails_recovers_as_a_unit(
    slurm_target: kc.Target, slurm_cluster: SlurmCluster, tmp_path: Path, fault: str
) -> None:
    """num_hosts=2, worker 1's node fails (set DOWN by scontrol: its slurmd kills the
    tasks; or its slurmd SIGKILLed: Slurm declares the node dead after SlurmdTimeout and
    its task is reached only through storage): attempt 2 is one new Slurm job of 2
    workers, each of which finds no process of attempt 1 alive when it starts; worker 0's
    value is the result, once."""
    marker = tmp_path / "runs.txt"
    target = slurm_target.merge({"num_hosts": 2, "max_recoveries": 1})
    handle = kc.submit(slurm_fns.as_a_unit, (str(marker), 600), target=target)
    until("both workers of attempt 1 to run", lambda: len(_lines(marker)) == 2)
    first = _lines(marker)[0][0]
    nodes = slurm_cluster.run("squeue", "-h", "-j", first, "-o", "%N").strip()
    victim = slurm_cluster.run("scontrol", "show", "hostnames", nodes).split()[1]
    if fault == "node-down":
        slurm_cluster.run("scontrol", "update", f"nodename={victim}", "state=down", "reason=test")
    else:
        slurm_cluster.stop_node(victim)
    try:
        assert handle.result(timeout=300) == 2
    finally:
        if fault == "slurmd-killed":
            slurm_cluster.start_node(victim)
        slurm_cluster.run("scontrol", "update", f"nodename={victim}", "state=resume", check=False)
        slurm_cluster.wait_nodes()
    state = handle.state()
    assert (state.status, state.recoveries) == (kc.JobStatus.SUCCEEDED, 1), state
    lines = _lines(marker)
    second = [line for line in lines if line[0] != first]
    assert sorted(line[1] for line in second) == ["0", "1"], lines  # one job, both workers
    assert len({line[0] for line in second}) == 1, lines
    assert all(line[2] == "0" for line in second), f"attempt 1 still ran: {lines}"
    status = slurm_cluster.run("squeue", "-h", "-t", "all", "-j", first, "-o", "%T").strip()
    assert status == "NODE_FAIL", status
