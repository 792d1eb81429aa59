"""The end of a real multi-host job's log stream (a JobSet on the test cluster's 4-host
v5e slice) waits for every worker's log: worker 2's pod still runs, and prints only after
the stream saw the job SUCCEEDED (worker 0's decision); its lines are printed, once each."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

import kinetic_core as kc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_worker_logs import _slice

from tests.core import workerfns

#: Worker 2 is released this long after the stream saw the job end (so on a stream that
#: drains once, its lines come after the stream ended; no assertion depends on it).
RELEASE_AFTER = 2.0


def test_stream_logs_waits_for_a_worker_pod_still_printing_after_the_job_ended(
    kube: kc.Target, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hold = tmp_path / "worker-2-may-print"
    args = (str(tmp_path / "barrier"), -1, 3, str(hold), 2)
    (tmp_path / "barrier").mkdir()
    job = kc.submit(workerfns.rendezvous, args, target=_slice(kube))
    seen: list[kc.JobStatus] = []

    def release_worker_2_later(state: kc.JobState) -> None:
        seen.append(state.status)
        if state.terminal:
            threading.Timer(RELEASE_AFTER, hold.touch).start()

    value = job.result(
        timeout=180, stream_logs=True, on_status_change=release_worker_2_later, cleanup=False
    )
    assert value["index"] == 0 and seen[-1] is kc.JobStatus.SUCCEEDED
    printed = [x for x in capsys.readouterr().out.splitlines() if " line " in x]
    for k in range(4):  # each worker's lines once, in its order
        assert [x for x in printed if x.startswith(f"[w{k}] ")] == [
            f"[w{k}] line {i} of worker {k}" for i in range(3)
        ]
    job.cleanup()
