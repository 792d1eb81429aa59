"""Job bodies of the output_dir and debug tests (importable by the job processes)."""

from __future__ import annotations

import os
import time


def write_and_meet(name: str, text: str, mine: str, other: str) -> str:
    """Write ``name`` into the job's output folder, say so (``mine``), then wait (bounded)
    for the other job to have written its own: the two jobs are running at the same time."""
    path = os.path.join(os.environ["KINETIC_OUTPUT_DIR"], name)
    with open(path, "w") as fh:
        fh.write(text)
    with open(mine, "w"):
        pass
    for _ in range(1200):
        if os.path.exists(other):
            return path
        time.sleep(0.05)
    raise TimeoutError(f"{other} never appeared: the jobs did not overlap")


def fail_after_writing(name: str) -> None:
    """Leave a file in the job's working directory and output folder, then fail."""
    with open(os.path.join(os.environ["KINETIC_OUTPUT_DIR"], name), "w") as fh:
        fh.write("state to inspect")
    raise ValueError("boom for debugging")


def succeed() -> int:
    return 42
