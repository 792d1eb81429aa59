"""Round trips, remote errors, observation and cleanup on the real local backend."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import kinetic_core as kc
from tests.core import jobfns


def test_sync_round_trip_with_kwargs(storage_uri: str) -> None:
    job = kc.submit(jobfns.add, (2,), {"b": 40})
    assert job.result(timeout=60) == 42
    state = job.state()
    assert state.status is kc.JobStatus.SUCCEEDED
    assert state.exit_code == 0 and state.started_at and state.finished_at


def test_async_round_trip(storage_uri: str) -> None:
    async def main() -> tuple[int, kc.JobState]:
        job = kc.submit(jobfns.add, (1, 2))
        value = await job.aresult(timeout=60)
        return value, await job.astate()

    value, state = asyncio.run(main())
    assert value == 3
    assert state.status is kc.JobStatus.SUCCEEDED


def test_closure_from_decorator_and_options(storage_uri: str) -> None:
    offset = 100

    @kc.run(tags={"team": "ml"}, life_span=600)
    def train(epochs: int, lr: float = 0.1) -> dict[str, float]:
        return {"loss": epochs * lr + offset}

    assert train(3, lr=0.5) == {"loss": 101.5}
    job = train.options(name="nightly", tags={"night": "1"}).run_async(1)
    assert job.name == "nightly"
    assert job.tags == {"team": "ml", "night": "1"}
    assert job.target["life_span"] == 600
    assert job.result(timeout=60) == {"loss": 100.1}


def test_remote_exception_keeps_type_and_traceback(storage_uri: str) -> None:
    job = kc.submit(jobfns.fail, ("bad lr",))
    with pytest.raises(ValueError, match="bad lr") as info:
        job.result(timeout=60)
    note = "\n".join(info.value.__notes__)
    assert "Remote traceback" in note and "jobfns.py" in note and job.job_id in note
    state = job.state()
    assert state.status is kc.JobStatus.FAILED
    assert state.reason == "Error" and "ValueError: bad lr" in (state.message or "")
    assert state.exit_code == 1
    # Failed jobs keep their artifacts: the error can be read again.
    with pytest.raises(ValueError):
        job.result(timeout=60)


def test_unpicklable_remote_exception_becomes_remote_error(storage_uri: str) -> None:
    job = kc.submit(jobfns.fail_unpicklable, ("holding a lock",))
    with pytest.raises(kc.RemoteError) as info:
        job.result(timeout=60)
    assert info.value.type_name.endswith("Unpicklable")
    assert info.value.remote_message == "holding a lock"
    assert "fail_unpicklable" in info.value.remote_traceback


def test_unpicklable_return_value_fails_in_store_phase(storage_uri: str) -> None:
    job = kc.submit(jobfns.unpicklable_result)
    with pytest.raises(kc.SerializationError) as info:
        job.result(timeout=60)
    assert "Remote traceback" in "\n".join(info.value.__notes__)
    assert "phase store" in "\n".join(info.value.__notes__)


def test_function_sees_job_id_output_dir_and_captured_env(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "s3cret-value")
    job = kc.submit(
        jobfns.echo_env, ("KINETIC_JOB_ID", "WANDB_API_KEY"), target={"env": ["WANDB_API_KEY"]}
    )
    handle_text = Path(storage_uri[7:], "jobs", job.job_id, "handle.json").read_text()
    assert "s3cret-value" not in handle_text  # values travel only inside the payload
    assert job.result(timeout=60) == {"KINETIC_JOB_ID": job.job_id, "WANDB_API_KEY": "s3cret-value"}
    out = kc.submit(jobfns.write_output, ("model.txt", "weights"))
    path = out.result(timeout=60)
    assert path.startswith(out.output_dir) and Path(path).read_text() == "weights"


def test_logs_tail_and_follow(storage_uri: str) -> None:
    job = kc.submit(jobfns.chatty, (30, 0.02))
    followed = [line for line in job.follow_logs(timeout=60) if line.startswith("line")]
    assert followed == [f"line {i}" for i in range(30)]
    assert job.logs(tail=2).splitlines() == ["line 28", "line 29"]


def test_result_cleans_up_and_then_explains(storage_uri: str) -> None:
    job = kc.submit(jobfns.add, (1, 1))
    assert job.result(timeout=60) == 2
    root = Path(storage_uri[7:])
    assert not (root / "jobs" / job.job_id / "result.pkl").exists()
    assert not (root / "backend-local" / job.job_id).exists()
    assert job.state().status is kc.JobStatus.SUCCEEDED  # the tombstone still resolves
    with pytest.raises(kc.ResultNotAvailable, match="cleanup=False"):
        job.result(timeout=60)
    kept = kc.submit(jobfns.add, (2, 2))
    assert kept.result(timeout=60, cleanup=False) == 4
    assert kept.result(timeout=60) == 4


def test_handle_round_trip_and_attach(storage_uri: str) -> None:
    job = kc.submit(jobfns.add, (5, 5))
    again = kc.JobHandle.from_json(job.to_json())
    assert again == job
    attached = kc.attach(job.job_id)
    assert attached == job
    assert attached.result(timeout=60) == 10


def test_list_jobs_filters_newest_first(storage_uri: str) -> None:
    a = kc.submit(jobfns.add, (1,), name="alpha", tags={"team": "a"})
    b = kc.submit(jobfns.add, (2,), name="beta", tags={"team": "b"})
    a.wait(60)
    b.wait(60)
    assert [h.job_id for h in kc.list_jobs()] == [b.job_id, a.job_id]
    assert [h.job_id for h in kc.list_jobs(tags={"team": "a"})] == [a.job_id]
    assert [h.job_id for h in kc.list_jobs(name="beta")] == [b.job_id]
    assert len(kc.list_jobs(limit=1)) == 1
    assert len(kc.list_jobs(status="SUCCEEDED")) == 2
    assert kc.list_jobs(status=kc.JobStatus.RUNNING) == []


def test_wait_timeout_leaves_job_running(storage_uri: str) -> None:
    job = kc.submit(jobfns.sleep, (30,))
    with pytest.raises(kc.WaitTimeout, match="keeps running"):
        job.result(timeout=0.5)
    assert isinstance(kc.WaitTimeout("x"), TimeoutError)
    assert job.status() is kc.JobStatus.RUNNING
    job.cancel()


def test_shared_poller_makes_one_bulk_poll_per_tick(storage_uri: str) -> None:
    jobs = [kc.submit(jobfns.sleep, (0.5, i), target={"poll_interval": 0.2}) for i in range(20)]
    from kinetic_core.backends import get_backend

    instance = get_backend(kc.Target().resolve())
    calls: list[int] = []
    original = instance.poll

    def counting(job_ids: list[str]) -> dict[str, object]:
        calls.append(len(job_ids))
        return original(job_ids)  # type: ignore[return-value]

    instance.poll = counting  # type: ignore[method-assign]
    try:

        async def main() -> list[kc.JobState]:
            poller = kc.shared_poller()  # one per process: count this test's polls only
            before = poller.polls
            states = await asyncio.gather(*(poller.wait(j, timeout=60) for j in jobs))
            assert poller.polls - before == len(calls)
            return list(states)

        states = asyncio.run(main())
    finally:
        del instance.poll
    assert all(s.status is kc.JobStatus.SUCCEEDED for s in states)
    # Every tick asked the backend once for all waiting jobs, never once per job.
    assert calls and calls[0] == 20 and len(calls) < 20 * 3


def test_submit_from_module_not_importable_by_name(storage_uri: str, tmp_path: Path) -> None:
    """Airflow imports DAG files under generated names: such functions travel by value."""
    import importlib.util

    src = tmp_path / "dagfile.py"
    src.write_text("def helper(x):\n    return x * 3\n\ndef task(x):\n    return helper(x) + 1\n")
    spec = importlib.util.spec_from_file_location("unusual_prefix_abc_dagfile", src)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    try:
        assert kc.submit(module.task, (4,)).result(timeout=60) == 13
    finally:
        del sys.modules[spec.name]


def test_missing_module_error_says_how_to_ship_it(
    storage_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import types

    ghost = types.ModuleType("ghostmod")
    exec("def f():\n    return 1\n", ghost.__dict__)
    monkeypatch.setitem(sys.modules, "ghostmod", ghost)
    monkeypatch.setattr("kinetic_core.jobs.submission._by_value_modules", lambda fn, target: [])
    job = kc.submit(ghost.f)
    with pytest.raises(Exception) as info:
        job.result(timeout=60)
    assert "phase load" in "\n".join(info.value.__notes__)
    assert "'ghostmod'" in str(info.value) and "pickle_by_value=['ghostmod']" in str(info.value)
    assert "Version skew" not in str(info.value)
    # With pickle_by_value the same function runs.
    monkeypatch.setattr(
        "kinetic_core.jobs.submission._by_value_modules",
        lambda fn, target: list(target.pickle_by_value or []),
    )
    assert kc.submit(ghost.f, target={"pickle_by_value": ["ghostmod"]}).result(timeout=60) == 1


def test_threads_share_nothing_unsafe(storage_uri: str) -> None:
    results: list[int] = []
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            results.append(kc.submit(jobfns.add, (i, i)).result(timeout=120))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(results) == [2 * i for i in range(8)]


def test_handle_json_has_no_secrets(storage_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KINETIC_SIGNING_KEY", "top-secret-key")
    job = kc.submit(jobfns.add, (1, 2))
    text = Path(storage_uri[7:], "jobs", job.job_id, "handle.json").read_text()
    assert "top-secret-key" not in text and "signing_key" not in json.loads(text)
    assert "top-secret-key" not in job.to_json() and "top-secret-key" not in repr(job)
    assert job.result(timeout=60) == 3
    assert isinstance(json.loads(text)["hmac"], str)  # signed, so edits are refused


def test_cancel_records_where_it_came_from(storage_uri: str) -> None:
    job = kc.submit(jobfns.sleep, (60,))
    assert job.cancel() is True
    state = kc.attach(job.job_id).state()
    assert state.status is kc.JobStatus.CANCELLED
    assert state.message == f"cancelled from {socket.gethostname()}"


def test_rewaiting_continues_the_job_schedule(storage_uri: str) -> None:
    """Triggers wait in slices (to stream logs between them): the backoff must carry over."""
    job = kc.submit(jobfns.sleep, (30,), target={"poll_interval": 1.0})

    async def main() -> None:
        poller = kc.shared_poller()
        before = poller.polls
        with pytest.raises(kc.WaitTimeout):
            await job.await_(timeout=0.3)
        schedule = poller.schedules[job.job_id]
        first_slice = poller.polls - before
        due_after_first_slice = schedule.due
        with pytest.raises(kc.WaitTimeout):
            await job.await_(timeout=0.3)
        second_slice = poller.polls - before - first_slice
        assert poller.schedules[job.job_id] is schedule  # same schedule, not a fresh fast one
        assert schedule.due >= due_after_first_slice
        # The first slice ran the fast start of the backoff; the second continued at the
        # longer delays it had reached, so it polled fewer times than a fresh start would.
        assert first_slice >= 3, first_slice
        assert second_slice < first_slice, (first_slice, second_slice)

    asyncio.run(main())
    job.cancel()


@pytest.mark.timeout(30)
def test_local_backend_wakes_the_wait_when_a_job_ends(storage_uri: str) -> None:
    """The sync loop's sleep ends when a supervisor exits, not at the next backoff tick."""
    from kinetic_core.backends import get_backend

    job = kc.submit(jobfns.sleep, (0.5, "done"))
    backend = get_backend(kc.Target().resolve())
    backend.sleep_until_change([job.job_id], 600)  # type: ignore[attr-defined]
    assert job.state().terminal  # it returned because the job ended (a missed wake-up times out)
    assert job.result(timeout=10) == "done"


def test_a_job_launched_while_an_observer_polls_it_is_not_lost(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An observer (a batch driver, a second process) polls a job the moment before its
    submitter launches it: the backend says "no such job", and by the time the observer
    reads storage, ``launched.json`` is there. That is a launch it missed, not a deletion
    (a CI run saw a batch child sealed Lost this way, then launched again)."""
    from kinetic_core.backends.local.backend import LocalBackend
    from kinetic_core.control.resolution import resolve_states
    from kinetic_core.jobs.handle import JobHandle
    from kinetic_core.jobs.submission import prepare

    plan = prepare(jobfns.add, (2, 3), {}, target=kc.Target(storage=storage_uri))
    job_id = "observed-launch-1"
    observer = JobHandle(
        job_id=job_id,
        storage=storage_uri,
        target=plan.target.to_dict(),
        name="add",
        created_at=time.time(),
        attempt=1,
    )
    submitted: list[kc.JobHandle] = []
    real_poll = LocalBackend.poll

    def poll_then_launch(self: LocalBackend, job_ids: list[str]) -> dict[str, Any]:
        found = real_poll(self, job_ids)
        if not submitted:  # the submitter launches right after the observer's poll
            submitted.append(plan.create(job_id, attempt=1, key=None))
        return found

    monkeypatch.setattr(LocalBackend, "poll", poll_then_launch)
    (state,) = resolve_states([observer])
    assert not state.terminal, state
    assert submitted[0].result(timeout=60) == 5
