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
