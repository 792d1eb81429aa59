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


def data_round_trip(arg: str, mounted: str) -> dict[str, object]:
    """Read a Data argument and a Data volume; write the output folder."""
    with open(arg) as fh:
        text = fh.read()
    names = sorted(os.listdir(mounted))
    with open(os.path.join(os.environ["KINETIC_OUTPUT_DIR"], "seen.txt"), "w") as fh:
        fh.write(text + "|" + ",".join(names))
    return {"arg": text, "mounted": names, "out": os.environ["KINETIC_OUTPUT_DIR"]}


def where_am_i() -> dict[str, object]:
    return {
        "cwd": os.getcwd(),
        "cwd_entries": sorted(os.listdir(".")),
        "env": sorted(os.environ),
    }
