"""Functions the tests run remotely (importable by the job processes)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path


def double(x: int) -> int:
    print(f"doubling {x}")
    return 2 * x


def add(a: int, b: int = 0) -> int:
    return a + b


class BoomError(ValueError):
    pass


def boom(message: str) -> None:
    raise BoomError(message)


def fail_first(marker: str) -> str:
    """Fails on the first call, succeeds afterwards (the marker file remembers)."""
    path = Path(marker)
    if not path.exists():
        path.write_text("failed once")
        raise RuntimeError("first attempt fails")
    return "ok on retry"


def count_call(counter: str, value: int) -> int:
    with open(counter, "a") as fh:
        fh.write(f"{os.getpid()}\n")
    return value * 10


def sleepy(seconds: float) -> str:
    print("started sleeping", flush=True)
    time.sleep(seconds)
    return "woke up"


def chatty(n: int, pause: float) -> int:
    for i in range(n):
        print(f"remote line {i}", flush=True)
        time.sleep(pause)
    return n


def maybe_fail(x: int) -> int:
    if x % 3 == 0:
        raise ValueError(f"bad input {x}")
    return x * x


def wait_for_release(workdir: str, value: int) -> int:
    """Records its pid in ``workdir/pids``, then waits (at most 120 s) for ``workdir/release``."""
    folder = Path(workdir)
    with open(folder / "pids", "a") as fh:
        fh.write(f"{os.getpid()}\n")
    deadline = time.monotonic() + 120
    while not (folder / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return value * 2


async def async_square(x: int) -> int:
    """An async function: the job's runner awaits it remotely."""
    await asyncio.sleep(0)
    return x * x


def lost_once(workdir: str) -> str:
    """The first run checkpoints, then SIGKILLs its own supervisor and runner (their
    process group: as if the machine restarted). A later run resumes from the checkpoint."""
    import signal

    checkpoint = Path(workdir) / "checkpoint"
    with open(Path(workdir) / "starts", "a") as fh:
        fh.write(f"{os.environ['KINETIC_JOB_ID']}\n")
    if not checkpoint.exists():
        checkpoint.write_text("step 5")
        os.killpg(os.getpgrp(), signal.SIGKILL)
    return f"resumed from {checkpoint.read_text()}"


def say_or_fail(x: int) -> int:
    """Prints a line; input 3 fails, the others take a while (a fail_fast batch stops)."""
    print(f"child says {x}", flush=True)
    if x == 3:
        raise ValueError("three fails")
    time.sleep(1.0)
    return x
