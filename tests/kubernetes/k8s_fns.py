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


def slotted(value: int, slots: str, then_sleep: float = 0.3) -> int:
    """Records its run (``{slots}.runs``) and how many children held a slot when it
    started (``{slots}.seen-{value}``), as tests/core/batch_helpers.slotted does."""
    with open(f"{slots}.runs", "a") as fh:
        fh.write(f"{value} {os.getpid()}\n")
    held = os.path.join(slots, f"{value}-{os.getpid()}")
    open(held, "w").close()
    try:
        with open(f"{slots}.seen-{value}-{os.getpid()}", "w") as fh:
            fh.write(str(len(os.listdir(slots))))
        time.sleep(then_sleep)
        return value
    finally:
        os.unlink(held)
