"""Preemption by a higher-priority partition and node failure, recovered exactly once."""

from __future__ import annotations

from pathlib import Path

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
