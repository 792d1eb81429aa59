"""Job bodies for the log tests, shipped by value (pods do not import tests/)."""

from __future__ import annotations

import os
import subprocess
import sys
import time


def _wait_for(path: str, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)


def print_lines(count: int) -> int:
    """``line i`` from print, the raw fds and a child process, as a job's output comes."""
    for i in range(count):
        if i % 3 == 0:
            print(f"line {i}", flush=True)
        elif i % 3 == 1:
            os.write(2, f"line {i}\n".encode())
        else:
            subprocess.run([sys.executable, "-c", f"print('line {i}')"], check=True)
    return count


def print_then_fail(count: int) -> None:
    for i in range(count):
        print(f"step {i}", flush=True)
    raise RuntimeError("the nightly run failed")


def print_gated(count: int, gate: str) -> int:
    """The first half of ``line i``, then (once ``gate`` exists) the second half."""
    for i in range(count // 2):
        print(f"line {i}", flush=True)
    _wait_for(gate)
    for i in range(count // 2, count):
        print(f"line {i}", flush=True)
    return count


def print_then_sleep(count: int, ready: str, seconds: float) -> None:
    """``line i``, then ``ready`` is created and the job sleeps (until SIGTERM)."""
    for i in range(count):
        print(f"line {i}", flush=True)
    with open(ready, "w"):
        pass
    time.sleep(seconds)
