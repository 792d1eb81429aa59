"""Job bodies for the crash tests: each run leaves a trace, so duplicates show."""

from __future__ import annotations

import os
import time


def trace(directory: str, seconds: float, value: int) -> int:
    """Append this run's pid to a file named after the job (one line per run), sleep,
    return ``value``."""
    with open(os.path.join(directory, os.environ["KINETIC_JOB_ID"]), "a") as fh:
        fh.write(f"{os.getpid()}\n")
    time.sleep(seconds)
    return value


def runs(path: str) -> list[int]:
    try:
        with open(path) as fh:
            return [int(line) for line in fh if line.strip()]
    except FileNotFoundError:
        return []
