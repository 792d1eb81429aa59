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


def pod_view(
    names: list[str], mount: str, wait_for: str, read: tuple[str, ...] = ()
) -> dict[str, object]:
    """What the job's process sees: env values and the files under a mounted volume, once a
    sidecar has written ``wait_for`` there (the test node agent maps mount paths to per-pod
    folders and says where in NODE_AGENT_MOUNTS)."""
    import json

    folder = json.loads(os.environ.get("NODE_AGENT_MOUNTS", "{}")).get(mount, mount)
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(folder, wait_for)) and time.monotonic() < deadline:
        time.sleep(0.1)
    print("the kinetic container speaks", flush=True)
    with open(os.path.join(folder, "from-runner"), "w") as fh:
        fh.write("hello")
    mounts = json.loads(os.environ.get("NODE_AGENT_MOUNTS", "{}"))

    def local(path: str) -> str:
        for mounted, where in mounts.items():
            if path.startswith(mounted + "/"):
                return where + path[len(mounted) :]
        return path

    return {
        "read": {path: open(local(path)).read() for path in read},
        "env": {n: os.environ.get(n) for n in names},
        "files": sorted(os.listdir(folder)),
        "sidecar_wrote": open(os.path.join(folder, wait_for)).read().strip(),
    }
