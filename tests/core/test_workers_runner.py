"""Every worker of a multi-host job runs the real runner (``python -m kinetic_core.runtime.runner``,
as each pod does) with the env the JobSet manifest gives it, on one file:// store: each
runs the function once with its rank, only worker 0's value is the result, the first
failing worker decides FAILED and is named, a replacement of a worker refuses (117)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

import kinetic_core as kc
from kinetic_core.cli import main
from kinetic_core.control.logs import merged_rest, read_merged
from kinetic_core.control.polling import poll_ticks
from kinetic_core.errors import ConfigError
from kinetic_core.jobs.failures import describe_failure, failed_worker
from kinetic_core.records import layout
from kinetic_core.records.lifecycle import read_outcome
from kinetic_core.runtime import notice
from kinetic_core.states import REFUSED_EXIT_CODE
from kinetic_core.storage import open_storage
from tests.core.slice_runs import (
    COUNT,
    HOSTS,
    finish,
    lines_of,
    register,
    run_slice,
    start_worker,
    submit,
)


def seen_by(storage_uri: str, job_id: str, index: int) -> dict[str, object]:
    folder = layout.outputs(job_id) + (f"/worker-{index}" if index else "")
    return json.loads(open_storage(storage_uri).read_bytes(f"{folder}/seen.json"))


@pytest.fixture(autouse=True)
def scripted(monkeypatch: pytest.MonkeyPatch) -> None:
    register(monkeypatch)


def test_every_worker_runs_once_with_its_rank_and_worker_0s_value_is_the_result(
    storage_uri: str, tmp_path: Path
) -> None:
    job = submit(tmp_path / "barrier")
    first = [start_worker(storage_uri, job.job_id, k) for k in range(COUNT - 1)]
    store = open_storage(storage_uri)
    for _ in poll_ticks(interval=0.05, timeout=60, describe=lambda: "worker 1's start"):
        if store.exists(layout.job_file(job.job_id, "started-worker-1.json")):
            break
    # A replacement pod of worker 1 while worker 1 runs (waits for worker 3): refused.
    code, out = finish(start_worker(storage_uri, job.job_id, 1))
    assert code == REFUSED_EXIT_CODE, out
    assert "worker 1" in out and "more than once" in out
    assert read_outcome(open_storage(storage_uri), job.job_id) is None  # nothing decided
    first.append(start_worker(storage_uri, job.job_id, COUNT - 1))
    results = [finish(p) for p in first]
    assert [code for code, _ in results] == [0] * COUNT, results
    assert job.result(timeout=60, cleanup=False) == seen_by(storage_uri, job.job_id, 0)
    for k in range(COUNT):  # each its own rank, TPU and torch variables; its own folder
        assert seen_by(storage_uri, job.job_id, k) == {
            "index": k,
            "count": COUNT,
            "TPU_WORKER_ID": str(k),
            "TPU_WORKER_HOSTNAMES": ",".join(HOSTS),
            "RANK": str(k),
            "WORLD_SIZE": str(COUNT),
            "MASTER_ADDR": HOSTS[0],
            "MASTER_PORT": "8476",
        }
        started = "started.json" if k == 0 else f"started-worker-{k}.json"
        assert open_storage(storage_uri).exists(layout.job_file(job.job_id, started))
    assert job.state().status is kc.JobStatus.SUCCEEDED


def test_a_failing_worker_fails_the_job_named_with_its_traceback_and_log(
    storage_uri: str, tmp_path: Path
) -> None:
    hold = tmp_path / "worker-0-may-return"
    job = submit(tmp_path / "barrier", fail_on=2, hold=str(hold))
    procs = [start_worker(storage_uri, job.job_id, k) for k in range(COUNT)]
    assert finish(procs[2])[0] == 1
    hold.touch()  # worker 0 returns after worker 2 failed: its value is not the result
    assert [finish(p)[0] for p in procs] == [0, 0, 1, 0]
    state = job.state()
    assert (state.status, state.message) == (
        kc.JobStatus.FAILED,
        "worker 2: ValueError: boom on worker 2",
    )
    with pytest.raises(ValueError, match="boom on worker 2") as caught:
        job.result(timeout=30)
    assert failed_worker(caught.value) == 2
    assert "kinetic: raised on worker 2" in "".join(caught.value.__notes__)
    text = describe_failure(job, caught.value)
    assert "failed on worker 2" in text
    assert "--- last 50 log lines of" in text and "worker 2 ---" in text
    assert "line 2 of worker 2" in text  # THAT worker's log tail ...
    assert "of worker 1" not in text  # ... not another's


def test_worker_0s_success_then_another_workers_failure_keeps_succeeded(
    storage_uri: str, tmp_path: Path
) -> None:
    hold = tmp_path / "worker-3-may-fail"
    job = submit(tmp_path / "barrier", fail_on=3, hold=str(hold), held=3)
    procs = [start_worker(storage_uri, job.job_id, k) for k in range(COUNT)]
    assert [finish(p)[0] for p in procs[:3]] == [0, 0, 0]
    assert job.state().status is kc.JobStatus.SUCCEEDED
    hold.touch()  # worker 3 fails after worker 0 decided SUCCEEDED
    code, out = finish(procs[3])
    assert code == 1 and "boom on worker 3" in out, out
    assert job.state().status is kc.JobStatus.SUCCEEDED
    assert job.result(timeout=30)["index"] == 0


# ---- every worker's log ------------------------------------------------------------------
def per_worker(lines: list[str]) -> dict[int, list[str]]:
    """``[wK] text`` lines grouped by worker, in the order they came."""
    out: dict[int, list[str]] = {}
    for line in lines:
        head, _, text = line.partition("] ")
        assert head.startswith("[w"), line
        out.setdefault(int(head[2:]), []).append(text)
    return out


def test_every_workers_log_prefixed_or_one_worker_unprefixed(
    storage_uri: str, tmp_path: Path
) -> None:
    job = run_slice(storage_uri, tmp_path)
    expected = {k: lines_of(k) for k in range(COUNT)}
    assert per_worker(job.logs().splitlines()) == expected
    assert per_worker(list(job.follow_logs(timeout=60))) == expected
    assert list(job.follow_logs(worker=2, timeout=60)) == lines_of(2)  # no prefix
    assert job.logs(worker=3) == "".join(f"{line}\n" for line in lines_of(3))
    assert job.logs(tail=1) == "".join(f"[w{k}] line 2 of worker {k}\n" for k in range(COUNT))

    async def follow() -> list[str]:
        return [line async for line in job.afollow_logs(interval=0.2, timeout=60)]

    assert per_worker(asyncio.run(follow())) == expected  # the async twin: the same lines
    with pytest.raises(ConfigError, match="worker=4 is none of them"):
        job.logs(worker=4)


def test_one_cursor_over_every_worker_resumes_without_repeats(
    storage_uri: str, tmp_path: Path
) -> None:
    job = run_slice(storage_uri, tmp_path)
    text, cursor = job.read_logs()
    again, cursor = job.read_logs(cursor)  # read to the end: nothing comes twice
    assert again == "" and per_worker(text.splitlines()) == {k: lines_of(k) for k in range(COUNT)}
    stream = job.follow_logs(cursor=cursor, timeout=60)
    assert list(stream) == []  # a stream started at the end repeats nothing
    single = job.follow_logs(worker=1, timeout=60)
    assert list(single) == lines_of(1)
    assert list(job.follow_logs(worker=1, cursor=single.cursor, timeout=60)) == []


def test_an_unfinished_line_waits_in_the_cursor_for_its_end() -> None:
    """A worker's chunk may end mid-line (a print without its newline yet): the merged
    read keeps that part in the cursor, so the line comes whole, once, with its prefix."""
    chunks = {0: ["a1\npart", "ial\na2\n", ""], 1: ["b1\n", "", ""]}

    def read(cursor: str | None, k: int) -> tuple[str, str | None]:
        n = int(cursor or 0)
        return chunks[k][n] if n < len(chunks[k]) else "", str(n + 1)

    got, cursor = read_merged(read, 2, None)
    assert got == "[w0] a1\n[w1] b1\n"
    got, cursor = read_merged(read, 2, cursor)
    assert got == "[w0] partial\n[w0] a2\n"
    assert merged_rest(read_merged(read, 2, cursor)[1])[0] == []
    got, cursor = read_merged(lambda c, k: ("tail" if k else "", c), 2, cursor)
    assert (got, merged_rest(cursor)[0]) == ("", ["[w1] tail"])


def test_cli_logs_of_one_worker_or_all(
    storage_uri: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = run_slice(storage_uri, tmp_path)
    capsys.readouterr()
    assert main(["jobs", "logs", job.job_id, "--worker", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == lines_of(1)
    assert main(["jobs", "logs", job.job_id, "-f", "--worker", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == lines_of(2)
    assert main(["jobs", "logs", job.job_id, "-f"]) == 0
    assert per_worker(capsys.readouterr().out.splitlines()) == {
        k: lines_of(k) for k in range(COUNT)
    }


def test_a_worker_stopped_from_outside_decides_nothing(storage_uri: str, tmp_path: Path) -> None:
    job = submit(tmp_path / "barrier", hold=str(tmp_path / "never"), held=1)
    for k in (0, 2, 3):  # the others arrived: worker 1 goes on to wait for "never"
        (tmp_path / "barrier" / f"arrived-{k}").touch()
    proc = start_worker(storage_uri, job.job_id, 1)
    for _ in poll_ticks(interval=0.05, timeout=60, describe=lambda: "worker 1 in the function"):
        if (tmp_path / "barrier" / "arrived-1").exists():
            break
    proc.send_signal(signal.SIGTERM)  # its pod deleted, its node preempted
    code, out = finish(proc)
    assert code == notice.EXIT_CODE, out
    assert read_outcome(open_storage(storage_uri), job.job_id) is None  # the backend says why
    assert not open_storage(storage_uri).exists(layout.job_file(job.job_id, layout.RESULT))


def test_four_workers_ending_at_once_each_sync_their_own_outputs(
    gcs_emulator: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """On storage that is not a local folder each worker syncs its KINETIC_OUTPUT_DIR as
    it ends: worker 0's to the job's outputs, worker k's to ``worker-k/``; four at once on
    one machine (each its own local folder) clobber and lose nothing."""
    uri = gcs_emulator.uri(f"slice-{os.urandom(4).hex()}")
    monkeypatch.setenv("KINETIC_STORAGE", uri)
    job = submit(tmp_path / "barrier")
    procs = [start_worker(uri, job.job_id, k) for k in range(COUNT)]
    assert [finish(p)[0] for p in procs] == [0] * COUNT
    for k in range(COUNT):
        assert seen_by(uri, job.job_id, k)["index"] == k
    names = sorted(open_storage(uri).walk(layout.outputs(job.job_id)))
    assert names == ["seen.json"] + [f"worker-{k}/seen.json" for k in range(1, COUNT)]


def test_a_worker_that_starts_after_worker_0_succeeded_keeps_why_as_its_log(
    storage_uri: str, tmp_path: Path
) -> None:
    """A slice's worker whose pod started after worker 0 had decided SUCCEEDED runs
    nothing (exit 0); why is kept as its log in storage, where ``logs(worker=k)`` reads
    once the pod is gone (before: only in the pod's log, so the worker left no stream).
    A replacement of a worker that had started once leaves that worker's stream alone."""
    from kinetic_core.records.lifecycle import BY_RUNNER, decide, write_record
    from kinetic_core.records.log_chunks import read_all, read_meta

    job = submit(tmp_path / "barrier")
    store = open_storage(storage_uri)
    write_record(store, job.job_id, "started-worker-1.json", create_only=True, worker=1)
    assert decide(store, job.job_id, "SUCCEEDED", None, None, by=BY_RUNNER)[0]
    for k in (1, 2):
        code, out = finish(start_worker(storage_uri, job.job_id, k))
        assert code == 0, out
        assert "is already SUCCEEDED; not running it" in out
    assert "is already SUCCEEDED; not running it" in read_all(store, job.job_id, worker=2)
    assert (read_meta(store, job.job_id, worker=2) or {}).get("ended_ns")
    assert read_meta(store, job.job_id, worker=1) is None  # its first run's, not ours
