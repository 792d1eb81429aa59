"""Job bodies of the backend contract, shipped by value (a pod does not import tests/).

Each run appends a line to a file the test reads, so a test counts how often a job's
function really ran, whatever the backend. A multi-host job runs its function on every
worker: each line begins with the worker's index (``KINETIC_WORKER_INDEX``, 0 on a
single-host job), and a run of the job is a run of worker 0 (``harness.Held.count``).
"""

from __future__ import annotations

import os
import subprocess
import sys

# A child process that lives until the test creates the release file: the job's process
# tree outlives its runner (a local supervisor SIGKILLed takes its runner with it).
_WAIT_FOR_RELEASE = (
    "import os, sys, time\nwhile not os.path.exists(sys.argv[1]):\n    time.sleep(0.05)"
)


def _worker() -> str:
    """This worker's index: 0 on a single-host job (the variable is unset or empty)."""
    return os.environ.get("KINETIC_WORKER_INDEX") or "0"


def hold(runs: str, release: str) -> int:
    """Record this run, then wait in a child process until ``release`` exists."""
    child = subprocess.Popen([sys.executable, "-c", _WAIT_FOR_RELEASE, release])
    with open(runs, "a") as fh:  # after the child exists: a reader may count on it
        fh.write(f"{_worker()} {os.getpid()} {child.pid}\n")
    return child.wait()


def mark(runs: str) -> int:
    """Record this run and end at once."""
    with open(runs, "a") as fh:
        fh.write(f"{_worker()} {os.getpid()}\n")
    return 0


def talk(lines: int) -> int:
    """Print ``lines`` numbered lines (what the log cases read back)."""
    for i in range(lines):
        print(f"contract line {i}", flush=True)
    return lines
