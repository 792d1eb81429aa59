"""``result``/``aresult`` options (stream_logs, on_status_change, cleanup_timeout) and the
handle's read-only properties, on the real local backend."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest

import kinetic_core as kc
from kinetic_core.records import layout
from tests.core import jobfns


def _gated(tmp_path: Path) -> tuple[kc.JobHandle, Path]:
    """A job that returns 7 once the gate file exists (opened by the test's callback)."""
    gate = tmp_path / "gate"
    return kc.submit(jobfns.wait_for_file, (str(gate), 7)), gate


def _opener(gate: Path, seen: list[tuple[str, str | None]]) -> Any:
    """A callback that records each transition and opens the gate once RUNNING is seen: the
    job cannot end before the wait has reported it running."""

    def on_change(state: kc.JobState) -> None:
        seen.append((state.status.value, state.reason))
        if state.status is kc.JobStatus.RUNNING:
            gate.touch()

    return on_change


def _check_transitions(seen: list[tuple[str, str | None]]) -> None:
    assert len(seen) == len(set(seen)), seen  # once per transition
    statuses = [s for s, _ in seen if s != "PENDING"]
    assert statuses == ["RUNNING", "SUCCEEDED"], seen


# ---- on_status_change -----------------------------------------------------------------------


def test_on_status_change_reports_each_transition_once(storage_uri: str, tmp_path: Path) -> None:
    job, gate = _gated(tmp_path)
    seen: list[tuple[str, str | None]] = []
    assert job.result(timeout=60, on_status_change=_opener(gate, seen)) == 7
    _check_transitions(seen)


def test_a_raising_callback_never_breaks_the_wait(
    storage_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[str] = []

    def broken(state: kc.JobState) -> None:
        calls.append(state.status.value)
        raise RuntimeError("callback bug")

    job = kc.submit(jobfns.add, (20, 22))
    with caplog.at_level(logging.ERROR, logger="kinetic_core.control.polling"):
        assert job.result(timeout=60, on_status_change=broken) == 42
    assert calls[-1] == "SUCCEEDED"
    assert "on_status_change raised" in caplog.text and "callback bug" in caplog.text


def test_aresult_awaits_an_async_callback(storage_uri: str, tmp_path: Path) -> None:
    job, gate = _gated(tmp_path)
    seen: list[tuple[str, str | None]] = []

    async def on_change(state: kc.JobState) -> None:
        await asyncio.sleep(0)  # a real coroutine: it must be awaited to record anything
        _opener(gate, seen)(state)

    async def main() -> Any:
        return await job.aresult(timeout=60, on_status_change=on_change)

    assert asyncio.run(main()) == 7
    _check_transitions(seen)


def test_await_reports_transitions_and_survives_a_raising_async_callback(
    storage_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[str] = []

    async def broken(state: kc.JobState) -> None:
        calls.append(state.status.value)
        raise RuntimeError("async callback bug")

    job = kc.submit(jobfns.add, (1, 1))

    async def main() -> kc.JobState:
        return await job.await_(60, on_status_change=broken)

    with caplog.at_level(logging.ERROR, logger="kinetic_core.control.polling"):
        assert asyncio.run(main()).status is kc.JobStatus.SUCCEEDED
    assert calls[-1] == "SUCCEEDED" and len(calls) == len(set(calls))
    assert "async callback bug" in caplog.text


# ---- stream_logs ----------------------------------------------------------------------------


def test_stream_logs_prints_each_line_once_in_order(
    storage_uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    job = kc.submit(jobfns.chatty, (6, 0.05))
    assert job.result(timeout=60, stream_logs=True) == 6
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("line ")]
    assert lines == [f"line {i}" for i in range(6)]


def test_stream_logs_with_on_status_change(
    storage_uri: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The log stream is the wait: the callback is fed from the states it reads."""
    gate = tmp_path / "gate"
    job = kc.submit(jobfns.wait_for_file, (str(gate), 7, str(tmp_path / "ready")))
    seen: list[tuple[str, str | None]] = []
    assert job.result(timeout=60, stream_logs=True, on_status_change=_opener(gate, seen)) == 7
    _check_transitions(seen)


def test_aresult_streams_logs(storage_uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    job = kc.submit(jobfns.chatty, (5, 0.05))
    seen: list[str] = []

    async def main() -> Any:
        return await job.aresult(
            timeout=60, stream_logs=True, on_status_change=lambda s: seen.append(s.status.value)
        )

    assert asyncio.run(main()) == 5
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("line ")]
    assert lines == [f"line {i}" for i in range(5)]
    assert seen[-1] == "SUCCEEDED" and len(seen) == len(set(seen))


# ---- cleanup_timeout ------------------------------------------------------------------------


def test_cleanup_timeout_returns_the_value_and_leaves_the_rest(
    storage_uri: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A cleanup that blocks (the job's local log, which cleanup copies to storage, is a FIFO
    nobody writes: the open blocks, as a hung backend call would) is left behind after
    cleanup_timeout: the value comes back, a warning names `kinetic jobs cleanup`."""
    job = kc.submit(jobfns.add, (3, 4))
    assert job.wait(timeout=60).status is kc.JobStatus.SUCCEEDED
    log = tmp_path / "store" / "backend-local" / job.job_id / "output.log"
    assert log.exists()
    fifo = log.with_name("fifo")
    os.mkfifo(fifo)
    os.replace(fifo, log)
    payload = tmp_path / "store" / layout.job_file(job.job_id, layout.PAYLOAD)
    try:
        with caplog.at_level(logging.WARNING, logger="kinetic_core.jobs.handle"):
            assert job.result(timeout=60, cleanup_timeout=0.2) == 7
        assert f"kinetic jobs cleanup {job.job_id}" in caplog.text
        assert "cleanup_timeout=0.2s" in caplog.text
        assert payload.exists()  # not cleaned up yet: the cleanup is still blocked
    finally:
        fd = os.open(log, os.O_WRONLY | os.O_NONBLOCK)  # the blocked reader gets EOF
        os.close(fd)
    deadline = time.monotonic() + 60
    while payload.exists() and time.monotonic() < deadline:  # it goes on in the background
        time.sleep(0.05)
    assert not payload.exists()


def test_result_cleans_up_without_reading_the_ended_jobs_state_again(
    storage_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The state ``result()`` waited for is terminal and final: its cleanup frees the job
    without a status read (a cancel's), and frees all of it (envelopes, local folder)."""
    job = kc.submit(jobfns.add, (3, 4))
    assert job.wait(timeout=60).status is kc.JobStatus.SUCCEEDED
    reads: list[str] = []
    monkeypatch.setattr(kc.JobHandle, "state", lambda self: reads.append(self.job_id))
    assert job.result(timeout=60) == 7
    assert reads == []
    store = tmp_path / "store"
    assert not (store / layout.job_file(job.job_id, layout.PAYLOAD)).exists()
    assert not (store / layout.job_file(job.job_id, layout.RESULT)).exists()
    assert not (store / "backend-local" / job.job_id).exists()
    assert (store / layout.job_file(job.job_id, layout.COLLECTED)).exists()


def test_the_log_reads_the_same_after_cleanup_printed_or_empty(
    storage_uri: str, tmp_path: Path
) -> None:
    """Cleanup keeps a local job's log in storage before deleting its folder; an empty
    log is not copied (a missing copy reads as empty), a printed one is."""
    quiet, loud = kc.submit(jobfns.add, (1, 2)), kc.submit(jobfns.chatty, (3,))
    assert quiet.result(timeout=60) == 3
    assert loud.result(timeout=60) == 3
    for job in (quiet, loud):
        assert not (tmp_path / "store" / "backend-local" / job.job_id).exists()
    assert quiet.logs() == ""
    assert not (tmp_path / "store" / layout.job_file(quiet.job_id, layout.LOG)).exists()
    assert (tmp_path / "store" / layout.job_file(loud.job_id, layout.LOG)).exists()
    assert loud.logs().splitlines() == ["line 0", "line 1", "line 2"]


def test_bad_result_arguments_are_refused_before_waiting(storage_uri: str) -> None:
    job = kc.submit(jobfns.add, (1, 2))
    for kwargs, word in (
        ({"timeout": -1}, "timeout"),
        ({"cleanup_timeout": -0.5}, "cleanup_timeout"),
        ({"cleanup_timeout": "30"}, "cleanup_timeout"),
        ({"on_status_change": "print"}, "on_status_change"),
    ):
        with pytest.raises(kc.ConfigError, match=word):
            job.result(**kwargs)

        async def main(kwargs: dict[str, Any] = kwargs) -> Any:
            return await job.aresult(**kwargs)

        with pytest.raises(kc.ConfigError, match=word):
            asyncio.run(main())
    assert job.result(timeout=60, cleanup_timeout=None) == 3  # nothing was consumed


# ---- properties and to_dict -----------------------------------------------------------------


def test_properties_of_a_local_job(storage_uri: str) -> None:
    job = kc.submit(jobfns.add, (1, 2))
    assert (job.namespace, job.kubernetes_job_name, job.accelerator, job.image, job.spot) == (
        None,
        None,
        None,
        None,
        None,
    )
    assert (job.group_id, job.index) == (None, None)
    assert job.result(timeout=60) == 3


def test_properties_of_a_kubernetes_handle() -> None:
    """Pure properties: no cluster is asked."""
    target = {
        "backend": "gke",
        "storage": "gs://bucket/kinetic",
        "namespace": "ml",
        "accelerator": "tpu-v5e-8",
        "image": "us-docker.pkg.dev/p/r/kinetic:1",
        "spot": True,
    }
    job = kc.JobHandle(job_id="train-0123456789ab", storage=target["storage"], target=target)
    assert job.namespace == "ml"
    assert job.kubernetes_job_name is not None and job.job_id in job.kubernetes_job_name
    assert (job.accelerator, job.image, job.spot) == ("tpu-v5e-8", target["image"], True)
    plain = kc.JobHandle(
        job_id="x-0123456789ab", storage="gs://b", target={"backend": "kubernetes"}
    )
    assert (plain.namespace, plain.accelerator, plain.image, plain.spot) == (
        "default",
        None,
        None,
        False,
    )


def test_batch_children_know_their_batch(storage_uri: str) -> None:
    batch = kc.submit_map(jobfns.add, [(1,), (2,), (3,)])
    children = sorted(batch.as_completed(timeout=60), key=lambda c: c.index or 0)
    assert [(c.group_id, c.index) for c in children] == [(batch.group_id, i) for i in range(3)]
    assert [c.result(timeout=60, cleanup=False) for c in children] == [1, 2, 3]
    again = kc.attach(children[2].job_id)
    assert (again.group_id, again.index) == (batch.group_id, 2)


def test_to_dict_is_json_safe_and_holds_no_secret(storage_uri: str, tmp_path: Path) -> None:
    kubeconfig = "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user: {token: s3cr3t-t0ken}\n"
    target = kc.Target(signing_key="k3y-s3cr3t", kubeconfig=kubeconfig, namespace="ml")
    job = kc.submit(jobfns.add, (1, 2), target=target)
    for text in (json.dumps(job.to_dict()), job.to_json(), repr(job)):
        assert "k3y-s3cr3t" not in text and "s3cr3t-t0ken" not in text
    assert "signing_key" not in job.to_dict()
    back = kc.JobHandle.from_dict(json.loads(json.dumps(job.to_dict())), signing_key="k3y-s3cr3t")
    assert back == job
    assert back.result(timeout=60) == 3
