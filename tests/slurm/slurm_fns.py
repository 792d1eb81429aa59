"""Job bodies of the Slurm tests, shipped by value (the nodes run them from storage)."""

from __future__ import annotations

import os
import time


def add(a: int, b: int) -> int:
    return a + b


def where() -> dict[str, str]:
    """What a worker sees of Slurm and of its place in the job."""
    import kinetic_core as kc

    w = kc.worker()
    print(f"worker {w.index} of {w.count} on {os.environ.get('SLURMD_NODENAME')}", flush=True)
    keys = ("SLURM_JOB_ID", "SLURMD_NODENAME", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    return {k: os.environ.get(k, "") for k in keys} | {"index": str(w.index)}


def sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


def second_time_lucky(marker: str, seconds: float) -> int:
    """Attempt 1 marks and runs long (to be preempted or lose its node); a later attempt
    finds the mark and returns at once: how many attempts reached the function."""
    import kinetic_core as kc

    if kc.worker().index:  # a multi-node job's other workers have nothing to do
        return 0
    path = os.path.join(marker)
    with open(path, "a") as fh:
        fh.write(f"{os.environ.get('SLURM_JOB_ID')}\n")
    with open(path) as fh:
        runs = len(fh.read().splitlines())
    if runs == 1:
        time.sleep(seconds)
    return runs
