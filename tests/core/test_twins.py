"""Async twins: each waits or streams like its sync twin, through the core's one
implementation (shared poller, LogStream, batch tracker)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import kinetic_core as kc
from kinetic_core.backends import get_backend
from tests.core import jobfns

EXPECTED_LINES = [f"first half {i} second half {i}" for i in range(3)] + ["no newline at the end"]


@pytest.mark.timeout(60)
def test_follow_logs_twins_yield_whole_lines_and_end_with_the_job(storage_uri: str) -> None:
    job = kc.submit(jobfns.split_lines, (3, 0.3))

    async def follow() -> tuple[list[str], kc.LogStream]:
        stream = job.afollow_logs(interval=0.1)
        return [line async for line in stream], stream

    lines, stream = asyncio.run(follow())
    assert lines == EXPECTED_LINES  # a line written in two halves arrives whole
    assert stream.state is not None and stream.state.status is kc.JobStatus.SUCCEEDED
    assert not stream.stopped
    # The sync twin reads the same lines; a stream started at the cursor repeats none.
    assert list(job.follow_logs()) == EXPECTED_LINES
    assert list(job.follow_logs(cursor=stream.cursor)) == []
    assert job.result(timeout=30) == 3


@pytest.mark.timeout(60)
def test_afollow_logs_stops_when_until_says_so_and_leaves_the_job_running(
    storage_uri: str,
) -> None:
    job = kc.submit(jobfns.chatty, (1000, 0.05))
    asked: list[float] = []

    async def until() -> bool:
        asked.append(time.monotonic())
        return len(asked) >= 3

    async def follow() -> kc.LogStream:
        stream = job.afollow_logs(interval=0.2, until=until)
        async for _ in stream:
            pass
        return stream

    stream = asyncio.run(follow())
    assert stream.stopped and stream.state is None and len(asked) == 3
    assert job.status() is kc.JobStatus.RUNNING
    assert asyncio.run(job.acancel()) is True
    assert job.wait(timeout=30).status is kc.JobStatus.CANCELLED
    assert asyncio.run(job.acancel()) is False  # already final


@pytest.mark.timeout(60)
def test_follow_logs_timeout_raises_wait_timeout(storage_uri: str) -> None:
    job = kc.submit(jobfns.sleep, (30,))

    async def follow() -> None:
        async for _ in job.afollow_logs(interval=0.1, timeout=0.5):
            pass

    with pytest.raises(kc.WaitTimeout, match="still running"):
        asyncio.run(follow())
    with pytest.raises(kc.WaitTimeout):
        list(job.follow_logs(timeout=0.5))
    job.cancel()


@pytest.mark.timeout(60)
def test_state_collected_and_reattached_are_public(storage_uri: str) -> None:
    first = kc.submit(jobfns.sleep, (1, "v"), idempotency_key="twins-collected")
    assert not first.reattached
    again = kc.submit(jobfns.sleep, (1, "v"), idempotency_key="twins-collected")
    assert again.reattached and again.job_id == first.job_id
    assert "reattached" not in again.to_json()
    assert asyncio.run(first.aresult(timeout=30, cleanup=False)) == "v"
    state = asyncio.run(first.astate())
    assert state.status is kc.JobStatus.SUCCEEDED and state.collected
    assert state.to_dict()["collected"] is True
    # A collected job is not reused by its key: the next submit is attempt 2.
    third = kc.submit(jobfns.sleep, (0, "w"), idempotency_key="twins-collected")
    assert not third.reattached and third.attempt == 2
    assert third.result(timeout=30) == "w"


def test_child_status_vocabulary() -> None:
    assert {s for s in kc.ChildStatus if s.terminal} == {
        kc.ChildStatus.SUCCEEDED,
        kc.ChildStatus.FAILED,
        kc.ChildStatus.CANCELLED,
        kc.ChildStatus.NOT_FOUND,
        kc.ChildStatus.SUBMIT_FAILED,
    }
    assert all(kc.ChildStatus.of(s).terminal == s.terminal for s in kc.JobStatus)
    assert kc.ChildStatus.SUCCEEDED == "SUCCEEDED"  # str-compatible for JSON and old callers


@pytest.mark.timeout(120)
def test_batch_progress_twins_and_list_batches(storage_uri: str) -> None:
    batch = kc.submit_map(jobfns.sleep, [(0.2, i) for i in range(4)], max_concurrency=2)
    snapshots = list(batch.progress(timeout=60))
    assert snapshots[-1].done and snapshots[-1].counts == {kc.ChildStatus.SUCCEEDED: 4}
    assert all(0 <= s.finished <= 4 for s in snapshots)
    assert "4/4 finished" in snapshots[-1].describe()

    other = kc.submit_map(jobfns.sleep, [(0.2, i) for i in range(3)], max_concurrency=3)

    async def watch() -> list[kc.BatchProgress]:
        return [p async for p in other.aprogress(timeout=60)]

    async_snapshots = asyncio.run(watch())
    assert async_snapshots[-1].counts == {kc.ChildStatus.SUCCEEDED: 3}
    assert asyncio.run(other.astatuses()) == ["SUCCEEDED"] * 3
    listed = kc.list_batches()
    assert [b.group_id for b in listed[:2]] == [other.group_id, batch.group_id]
    assert listed[0].created_at >= listed[1].created_at


@pytest.mark.timeout(60)
def test_aas_completed_timeout_is_wait_timeout(storage_uri: str) -> None:
    batch = kc.submit_map(jobfns.sleep, [(30, 0)])

    async def drain() -> None:
        async for _ in batch.aas_completed(timeout=0.5):
            pass

    with pytest.raises(kc.WaitTimeout, match="keeps running"):
        asyncio.run(drain())
    asyncio.run(batch.acancel())
    assert batch.wait(timeout=30) == [kc.ChildStatus.CANCELLED]


@pytest.mark.timeout(60)
def test_one_shared_poller_serves_every_event_loop_of_the_process(storage_uri: str) -> None:
    """Waiters in two event loops (two threads, as Prefect runs tasks) share each poll."""
    jobs = [kc.submit(jobfns.sleep, (1, i), target={"poll_interval": 0.2}) for i in range(6)]
    backend = get_backend(kc.Target().resolve())
    sizes: list[int] = []
    original = backend.poll

    def counting(job_ids: list[str]) -> dict[str, object]:
        sizes.append(len(job_ids))
        return original(job_ids)  # type: ignore[return-value]

    pollers: list[kc.SharedPoller] = []

    def wait_in_own_loop(mine: list[kc.JobHandle], ready: threading.Barrier) -> None:
        async def main() -> None:
            pollers.append(kc.shared_poller())
            ready.wait()
            await asyncio.gather(*(j.await_(timeout=30) for j in mine))

        asyncio.run(main())

    backend.poll = counting  # type: ignore[method-assign]
    try:
        ready = threading.Barrier(2)
        threads = [
            threading.Thread(target=wait_in_own_loop, args=(jobs[i::2], ready)) for i in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        del backend.poll
    assert pollers[0] is pollers[1]
    assert max(sizes) == 6, f"each poll should cover the waiters of both loops: {sizes}"
    assert all(j.state().status is kc.JobStatus.SUCCEEDED for j in jobs)


@pytest.mark.timeout(120)
def test_failed_children_lists_failures_and_unsubmitted_inputs(storage_uri: str) -> None:
    batch = kc.submit_map(jobfns.fail, ["boom"])
    ok = kc.submit_map(jobfns.add, [(1, 2)])
    batch.wait(timeout=60)
    ok.wait(timeout=60)
    [failed] = asyncio.run(batch.afailed_children())
    assert failed.index == 0 and failed.job is not None
    assert failed.status is kc.ChildStatus.FAILED and failed.reason == "Error"
    assert "boom" in failed.message
    assert ok.failed_children() == []
