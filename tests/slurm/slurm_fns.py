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


def mark_and_sleep(marker: str, seconds: float) -> str:
    """Append this run's Slurm job id to ``marker``, sleep, return the id: a test counts
    the runs of the job from the marker."""
    job = os.environ.get("SLURM_JOB_ID", "?")
    with open(marker, "a") as fh:
        fh.write(f"{job}\n")
    time.sleep(seconds)
    return job


def gpus_seen() -> dict[str, str]:
    """What a job asking for gpus sees of the devices Slurm gave it."""
    keys = ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS", "GPU_DEVICE_ORDINAL", "SLURM_GPUS_ON_NODE")
    return {k: os.environ.get(k, "") for k in keys}


def alive_in(slurm_job: str) -> list[int]:
    """Live (non-zombie) processes on this machine that belong to Slurm job ``slurm_job``."""
    wanted = f"SLURM_JOB_ID={slurm_job}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                environ = fh.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as fh:
                zombie = fh.read().rsplit(")", 1)[1].split()[0] == "Z"
        except (OSError, IndexError):
            continue
        if wanted in environ and not zombie:
            found.append(int(entry))
    return found


def as_a_unit(marker: str, seconds: float) -> int:
    """Every worker appends ``slurm-id worker left`` to ``marker``, where ``left`` counts the
    live processes of every earlier attempt's Slurm job (it must be 0: an attempt starts
    only once every task of the one before is gone). Attempt 1 then sleeps (its node is
    to fail); a later one returns at once. Worker 0 returns how many attempts ran."""
    import kinetic_core as kc

    me, job = kc.worker(), os.environ.get("SLURM_JOB_ID", "?")
    with open(marker) if os.path.exists(marker) else open(os.devnull) as fh:
        earlier = {line.split()[0] for line in fh.read().splitlines()} - {job}
    left = sum(len(alive_in(j)) for j in earlier)
    with open(marker, "a") as fh:
        fh.write(f"{job} {me.index} {left}\n")
    if not earlier:
        time.sleep(seconds)
    # every worker of this attempt has written its line before the job can end (worker 0's
    # return decides it, and the cleanup that follows stops what still runs)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with open(marker) as fh:
            if sum(line.split()[0] == job for line in fh) >= me.count:
                break
        time.sleep(0.05)
    return len(earlier) + 1
