"""What ``sbatch`` gets for one job: its flags and its batch script (pure functions).

One kinetic job is one Slurm allocation of ``num_hosts`` nodes. The batch script runs one
runner per node through ``srun`` (each worker's output in its own file), telling each its
place (``KINETIC_WORKER_*``: ``kc.worker()``, and from it RANK, WORLD_SIZE, MASTER_ADDR).
Slurm never requeues the job itself (``--no-requeue``): a preempted or lost attempt ends,
and kinetic's recovery starts attempt n+1 as a new job once every task of n is gone.
"""

from __future__ import annotations

import math
import shlex

from kinetic_core.backends import LaunchSpec
from kinetic_core.backends.slurm.kind import job_name
from kinetic_core.util.workers import DEFAULT_COORDINATOR_PORT

#: Seconds between the grace signal (SIGTERM: the runner checkpoints, ``kc.preempted()``)
#: and the end of Slurm's time limit.
GRACE_S = 60
BATCH_LOG = "batch.log"
WORKER_LOG = "worker-{}.log"


def hosts_of(spec: LaunchSpec) -> int:
    return spec.target.num_hosts or 1


def time_limit(life_span: float) -> str:
    """``--time`` for ``life_span`` plus the grace, in whole minutes (Slurm's unit)."""
    return str(max(1, math.ceil((life_span + GRACE_S) / 60)))


def sbatch_argv(spec: LaunchSpec, folder: str) -> list[str]:
    """The sbatch command line (the script comes on stdin)."""
    t = spec.target
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name={job_name(spec.job_id)}",
        f"--output={folder}/{BATCH_LOG}",
        "--no-requeue",
        f"--nodes={hosts_of(spec)}",
        "--ntasks-per-node=1",
        f"--chdir={spec.workdir or folder}",
    ]
    if t.life_span:
        argv += [f"--time={time_limit(t.life_span)}", f"--signal=TERM@{GRACE_S}"]
    flags = {
        "partition": t.partition,
        "account": t.account,
        "qos": t.qos,
        "cpus-per-task": t.cpus,
        "mem": t.memory,
        "gres": f"gpu:{t.gpus}" if t.gpus is not None else None,
        "constraint": t.constraint,
    }
    argv += [f"--{flag}={value}" for flag, value in flags.items() if value is not None]
    return argv + list(t.sbatch_args or [])


def batch_script(spec: LaunchSpec, folder: str, python: str) -> str:
    """The batch script: one ``srun`` step, one runner per node of the allocation."""
    hosts = hosts_of(spec)
    runner = shlex.join([python, *spec.runner_args()])
    worker_env = (
        "export KINETIC_WORKER_INDEX=$SLURM_PROCID KINETIC_WORKER_COUNT=$SLURM_NTASKS; "
        if hosts > 1
        else ""
    )
    lines = [
        "#!/bin/bash",
        f"# kinetic job {spec.job_id}: {hosts} node(s), one runner each (see worker-N.log).",
    ]
    if hosts > 1:
        # Every worker's hostname (node names, index order) and the coordinator's address:
        # worker 0's node address, which the others can reach.
        lines += [
            'names=$(scontrol show hostnames "$SLURM_JOB_NODELIST")',
            'first=$(echo "$names" | head -n1)',
            'addr=$(scontrol show node "$first" -o | sed -n "s/.*NodeAddr=\\([^ ]*\\).*/\\1/p")',
            'export KINETIC_WORKER_HOSTNAMES=$(echo "$names" | paste -sd, -)',
            f"export KINETIC_COORDINATOR_ADDRESS=${{addr:-$first}}:{DEFAULT_COORDINATOR_PORT}",
        ]
    srun = [
        "srun",
        f"--nodes={hosts}",
        f"--ntasks={hosts}",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",  # a failed worker stops the others: the job does not hang
        f"--output={folder}/{WORKER_LOG.format('%t')}",
    ]
    lines.append(f"exec {shlex.join(srun)} bash -c {shlex.quote(worker_env + 'exec ' + runner)}")
    return "\n".join(lines) + "\n"
