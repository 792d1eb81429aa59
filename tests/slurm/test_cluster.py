"""The private cluster itself: a batch job runs, and a step spans nodes one task each."""

from __future__ import annotations

import time

from tests.slurm.cluster import SlurmCluster


def test_sbatch_wrap_runs(slurm_cluster: SlurmCluster) -> None:
    out = slurm_cluster.root / "wrap.out"
    job = slurm_cluster.run(
        "sbatch", "--parsable", f"--output={out}", "--wrap", "echo ran-$SLURM_JOB_ID"
    ).strip()
    assert job.isdigit(), job
    for _ in range(600):
        if out.exists() and out.read_text().strip():
            break
        time.sleep(0.1)
    assert out.read_text().strip() == f"ran-{job}"


def test_srun_places_one_task_per_node(slurm_cluster: SlurmCluster) -> None:
    out = slurm_cluster.run(
        "srun", "-N2", "--ntasks-per-node=1", "bash", "-c", "echo $SLURMD_NODENAME $SLURM_PROCID"
    )
    lines = sorted(out.split("\n")[:-1])
    nodes = [line.split()[0] for line in lines]
    ranks = sorted(line.split()[1] for line in lines)
    assert len(set(nodes)) == 2 and ranks == ["0", "1"], out
