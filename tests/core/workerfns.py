"""Functions the workers of a multi-host test job run (importable by the runner processes)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import kinetic_core as kc

SEEN = ("TPU_WORKER_ID", "TPU_WORKER_HOSTNAMES", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def rendezvous(
    barrier: str, fail_on: int = -1, lines: int = 3, hold: str = "", held: int = 0
) -> dict[str, Any]:
    """Wait for every worker (as ``jax.distributed.initialize`` would), print ``lines``
    lines, keep what this worker saw in its own output folder, raise on ``fail_on``;
    worker ``held`` ends only once the file ``hold`` exists (when given)."""
    me = kc.worker()
    Path(barrier, f"arrived-{me.index}").touch()
    _wait(lambda: len(list(Path(barrier).glob("arrived-*"))) >= me.count)
    if hold and me.index == held:
        _wait(Path(hold).exists)
    for i in range(lines):
        print(f"line {i} of worker {me.index}", flush=True)
    seen = {"index": me.index, "count": me.count, **{k: os.environ.get(k) for k in SEEN}}
    Path(os.environ["KINETIC_OUTPUT_DIR"], "seen.json").write_text(json.dumps(seen))
    if me.index == fail_on:
        raise ValueError(f"boom on worker {me.index}")
    return seen


def _wait(done: Any) -> None:
    deadline = time.monotonic() + 60
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError("waited 60 s in vain")
        time.sleep(0.05)
