"""A batch handle follows a child to its newer attempt after another process retried it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import kinetic_core as kc
from tests.cleanup import kill_leftovers
from tests.core import batch_helpers as h


@pytest.mark.timeout(150)
def test_attached_handle_sees_the_attempt_another_process_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KINETIC_SIGNING_KEY", raising=False)
    monkeypatch.delenv("KINETIC_BACKEND", raising=False)
    root = tmp_path / "store"
    target = kc.Target(storage=f"file://{root}")
    markers = tmp_path / "markers"
    markers.mkdir()
    try:
        batch = kc.submit_map(
            h.flaky,
            [{"value": 7, "marker_dir": str(markers), "gate": str(tmp_path / "gate")}],
            target=target,
            retries=1,
        )
        batch.wait_submitted(60)
        stale = kc.attach_batch(batch.group_id, target=target, poll_timeout=90)
        deadline = time.monotonic() + 60
        while stale.jobs[0] is None and time.monotonic() < deadline:
            time.sleep(0.05)  # the detached driver launches it
        first = stale.jobs[0]
        assert first is not None and first.attempt == 1  # it has read the child's record
        (tmp_path / "gate").touch()  # now attempt 1 fails, and the driver retries it
        assert batch.wait(timeout=90) == ["SUCCEEDED"]  # attempt 1 failed, attempt 2 ran
        assert stale.statuses() == ["SUCCEEDED"]
        assert stale.failed_children() == [] and stale.failures() == []
        latest = stale.jobs[0]
        assert latest is not None and latest.attempt == 2
    finally:
        kill_leftovers(root)
