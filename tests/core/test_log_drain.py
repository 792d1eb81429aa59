"""The end of a multi-host job's log stream waits for every worker's log to be complete.

A multi-host job reads SUCCEEDED once worker 0 recorded its outcome; another worker's
runner may still be running. Worker 2 here prints its lines only after the stream saw the
job end: ``result(stream_logs=True)`` (and its async twin) still prints them, each once.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

import kinetic_core as kc
from tests.core.slice_runs import COUNT, finish, lines_of, register, start_worker, submit

#: Worker 2 is released this long after the stream saw the job end (so on a stream that
#: drains once, its lines come after the stream ended; no assertion depends on it).
RELEASE_AFTER = 2.0


@pytest.fixture(autouse=True)
def scripted(monkeypatch: pytest.MonkeyPatch) -> None:
    register(monkeypatch)


def per_worker(lines: list[str]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for line in lines:
        head, _, text = line.partition(" ")
        out.setdefault(int(head[2:-1]), []).append(text)
    return out


@pytest.mark.parametrize("twin", ["sync", "async"])
def test_stream_logs_waits_for_a_worker_still_printing_after_the_job_ended(
    twin: str, storage_uri: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hold = tmp_path / "worker-2-may-print"
    job = submit(tmp_path / "barrier", hold=str(hold), held=2)
    procs = [start_worker(storage_uri, job.job_id, k) for k in range(COUNT)]
    seen: list[kc.JobStatus] = []

    def release_worker_2_later(state: kc.JobState) -> None:
        seen.append(state.status)
        if state.terminal:
            threading.Timer(RELEASE_AFTER, hold.touch).start()

    capsys.readouterr()
    if twin == "sync":
        value = job.result(timeout=120, stream_logs=True, on_status_change=release_worker_2_later)
    else:
        value = asyncio.run(
            job.aresult(timeout=120, stream_logs=True, on_status_change=release_worker_2_later)
        )
    printed = capsys.readouterr().out.splitlines()
    assert [finish(p)[0] for p in procs] == [0] * COUNT
    assert seen[-1] is kc.JobStatus.SUCCEEDED and value["index"] == 0
    assert per_worker(printed) == {k: lines_of(k) for k in range(COUNT)}
