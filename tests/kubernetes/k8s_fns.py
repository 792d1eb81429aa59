"""Job bodies for the Kubernetes tests, shipped by value (pods do not import tests/)."""

from __future__ import annotations

import os
import sys
import time


def square(x: int) -> dict[str, object]:
    return {"square": x * x, "job_id": os.environ.get("KINETIC_JOB_ID")}


def talk_then_exit(lines: int, code: int) -> None:
    for i in range(lines):
        print(f"step {i}", flush=True)
    sys.stdout.flush()
    os._exit(code)


def slow_talk(lines: int, pause: float) -> int:
    for i in range(lines):
        print(f"tick {i}", flush=True)
        time.sleep(pause)
    return lines


def sleep(seconds: float) -> None:
    time.sleep(seconds)


def record_run(path: str, seconds: float) -> int:
    """Append one line per run of the function to ``path``, then sleep: counts executions."""
    with open(path, "a") as fh:
        fh.write(f"{os.getpid()}\n")
    time.sleep(seconds)
    with open(path) as fh:
        return len(fh.read().splitlines())
