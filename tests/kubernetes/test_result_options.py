"""``result(stream_logs=True, on_status_change=...)`` on a real multi-host job (a JobSet on
the test cluster's 4-host v5e slice): every worker's lines, prefixed ``[w{k}] ``, printed
once each and in order per worker, while the callback sees each transition once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import kinetic_core as kc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_worker_logs import _slice

from tests.core import workerfns


def test_stream_logs_of_a_slice_prints_every_workers_lines_once(
    kube: kc.Target, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[tuple[str, str | None]] = []
    job = kc.submit(workerfns.rendezvous, (str(tmp_path),), target=_slice(kube))
    value = job.result(
        timeout=180,
        stream_logs=True,
        on_status_change=lambda s: seen.append((s.status.value, s.reason)),
    )
    assert value["index"] == 0
    printed = [x for x in capsys.readouterr().out.splitlines() if " line " in x]
    for k in range(4):  # each worker's lines once, in its order
        assert [x for x in printed if x.startswith(f"[w{k}] ")] == [
            f"[w{k}] line {i} of worker {k}" for i in range(3)
        ]
    assert len(printed) == 12
    assert len(seen) == len(set(seen)) and seen[-1] == ("SUCCEEDED", None), seen
