"""Job functions for the browser tests (importable by the job processes)."""

from __future__ import annotations

import os
import time


def gated_ticks(gate: str, lines: int, pause: float) -> int:
    """Print ``tick 0``, wait until the file ``gate`` exists (the test has the page open
    on the running job), then print ``tick 1`` .. ``tick lines-1`` ``pause`` apart."""
    print("tick 0", flush=True)
    deadline = time.monotonic() + 300
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.05)
    for i in range(1, lines):
        time.sleep(pause)
        print(f"tick {i}", flush=True)
    return lines
