"""A batch's detached driver under kills: the batch still ends, each child once.

The driver is a local job (a supervisor in its own session). SIGKILLing its whole process
group mid-batch leaves the launch ledger as it was; the next process that watches the
batch takes the same idempotent steps and finishes it: no child launched twice, none
lost, max_concurrency never exceeded (as the children themselves saw it).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.batch.driver import DRIVER_KEY
from kinetic_core.util.ids import keyed_id
from tests.cleanup import kill_leftovers
from tests.core import batch_helpers as h


@pytest.mark.timeout(180)
def test_driver_killed_mid_batch_then_a_watcher_finishes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KINETIC_SIGNING_KEY", raising=False)
    root = tmp_path / "store"
    target = kc.Target(storage=f"file://{root}", poll_interval=0.5)
    slots = str(tmp_path / "slots")
    os.mkdir(slots)
    try:
        batch = kc.submit_map(
            h.slotted, [(i, slots, 0.5) for i in range(12)], target=target, max_concurrency=3
        )
        driver = keyed_id(DRIVER_KEY.format(group_id=batch.group_id, round=0), 1)
        launch = root / "backend-local" / driver / "launch.json"
        deadline = time.monotonic() + 60
        while len(h.runs(slots)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)  # the driver is launching children
        assert launch.exists(), "the batch has no detached driver"
        os.killpg(json.loads(launch.read_text())["pid"], signal.SIGKILL)
        assert kc.attach(driver, target=target).wait(timeout=30).status is kc.JobStatus.FAILED

        watcher = kc.attach_batch(batch.group_id, target=target, poll_timeout=120)
        assert watcher.results(cleanup=False) == list(range(12))
        assert sorted(v for v, _ in h.runs(slots)) == list(range(12)), "a child ran twice"
        assert h.most_seen(slots) <= 3
    finally:
        kill_leftovers(root)
