"""``JobHandle.send_signal`` end to end on real local jobs: the request goes through
storage, the job's runner raises it in its own process, the function's handler runs once,
the ack is recorded; refused and forged requests change nothing."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.cli import main
from kinetic_core.control.polling import poll_ticks
from kinetic_core.records import layout
from kinetic_core.runtime import signals
from kinetic_core.storage import open_storage
from kinetic_core.util import signing
from tests.core import signalfns, slice_runs


@pytest.fixture(autouse=True)
def quick_ticks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner looks for requests every 0.2 s (inherited by local jobs)."""
    monkeypatch.setenv(signals.POLL_ENV, "0.2")


def until(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    for _ in poll_ticks(interval=0.1, timeout=timeout, describe=lambda: what):
        if check():
            return


def ready_job(tmp_path: Path, name: str = "SIGUSR1") -> tuple[kc.JobHandle, Path]:
    marks = tmp_path / "handled.txt"
    job = kc.submit(signalfns.wait_for_signal, (str(marks), name))
    until(lambda: signalfns.ready(str(marks)) >= 1, "the job's handler")
    until(lambda: job.status() is kc.JobStatus.RUNNING, "the job to run")
    return job, marks


@pytest.mark.parametrize("given", ["SIGUSR1", "USR1", "usr1", " sigusr1 ", 10, "10"])
def test_signal_names_with_or_without_sig_and_numbers(given: object) -> None:
    assert signals.signal_name(given) == "SIGUSR1"  # type: ignore[arg-type]
    assert signals.signal_name(signal.SIGUSR2) == "SIGUSR2"


def test_the_functions_handler_runs_exactly_once_and_the_ack_is_recorded(
    storage_uri: str, tmp_path: Path
) -> None:
    job, marks = ready_job(tmp_path)
    req = job.send_signal("USR1", wait=True, timeout=60)
    assert req.signal == "SIGUSR1" and req.delivered, req
    assert [a.worker for a in req.acks] == [0]
    assert job.result(timeout=60) == 1
    lines = marks.read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith("SIGUSR1 "), lines
    ack = json.loads(
        open_storage(storage_uri).read_bytes(layout.signal_ack(job.job_id, req.request_id, 0))
    )
    assert ack["job_id"] == job.job_id and ack["delivered"] is True


async def test_async_twin_delivers(storage_uri: str, tmp_path: Path) -> None:
    job, marks = ready_job(tmp_path, "SIGUSR2")
    req = await job.asend_signal(signal.SIGUSR2, wait=True, timeout=60)
    assert req.delivered and req.signal == "SIGUSR2"
    assert await job.aresult(timeout=60) == 1
    assert marks.read_text().startswith("SIGUSR2 ")


@pytest.mark.parametrize("sig", ["SIGTERM", "KILL", 19, "SIGTSTP"])
def test_signals_that_stop_the_job_are_refused_and_nothing_is_written(
    storage_uri: str, tmp_path: Path, sig: object
) -> None:
    job = kc.submit(signalfns.wait_for_file, (str(tmp_path / "stop"),))
    until(lambda: job.status() is kc.JobStatus.RUNNING, "the job to run")
    with pytest.raises(kc.SignalRefused) as info:
        job.send_signal(sig)  # type: ignore[arg-type]
    if "TERM" in str(sig):
        assert "cancel()" in str(info.value)
    assert open_storage(storage_uri).list_names(layout.signals_dir(job.job_id)) == []
    with pytest.raises(kc.ConfigError, match="not a signal"):
        job.send_signal("SIGNOPE")
    (tmp_path / "stop").touch()
    assert job.result(timeout=60) == "done"


def test_a_terminal_job_refuses_a_signal(storage_uri: str) -> None:
    job = kc.submit(signalfns.wait_for_file, ("/nonexistent", 0.0))
    job.wait(timeout=60)
    with pytest.raises(kc.SignalRefused, match="SUCCEEDED"):
        job.send_signal("SIGUSR1")
    assert open_storage(storage_uri).list_names(layout.signals_dir(job.job_id)) == []


def test_a_signal_without_a_handler_is_not_delivered_and_the_job_runs_on(
    storage_uri: str, tmp_path: Path
) -> None:
    """SIGUSR1's default action ends the process: with no handler installed the runner
    refuses it and says why, instead of killing the job."""
    stop = tmp_path / "stop"
    job = kc.submit(signalfns.wait_for_file, (str(stop),))
    until(lambda: job.status() is kc.JobStatus.RUNNING, "the job to run")
    req = job.send_signal("SIGUSR1", wait=True, timeout=60)
    assert not req.delivered and "no handler" in req.acks[0].note, req
    stop.touch()
    assert job.result(timeout=60) == "done"


def test_forged_requests_are_ignored_and_logged(
    storage_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a signing key: an unsigned request, and a signed one naming another job, are
    not delivered (the handler never runs); a request sent through the API then is."""
    monkeypatch.setenv("KINETIC_SIGNING_KEY", "k" * 32)
    job, marks = ready_job(tmp_path)
    storage = open_storage(storage_uri)
    forged = {"job_id": job.job_id, "request_id": "", "signal": "SIGUSR1", "worker": None}
    for i, fields in enumerate([forged, {**forged, "job_id": "someone-else"}]):
        request_id = f"{time.time_ns():020d}-{i:012x}"
        fields = {**fields, "request_id": request_id}
        if i == 1:
            fields["hmac"] = signing.mac("k" * 32, fields)
        storage.write_bytes(
            layout.signal_request(job.job_id, request_id), json.dumps(fields).encode()
        )
    until(lambda: job.logs().count("ignored signal request") == 2, "the runner to log both")
    assert "signature is invalid" in job.logs() and "names job 'someone-else'" in job.logs()
    assert not marks.exists()  # neither reached the handler
    assert job.send_signal("SIGUSR1", wait=True, timeout=60).delivered
    assert job.result(timeout=60) == 1


def test_cli_signal(storage_uri: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job, marks = ready_job(tmp_path)
    assert main(["jobs", "signal", job.job_id, "SIGTERM"]) == 2
    assert "cancel" in capsys.readouterr().err
    assert main(["jobs", "signal", job.job_id, "usr1", "--wait"]) == 0
    out = capsys.readouterr().out
    assert f"{job.job_id}: SIGUSR1 sent to every worker" in out and "worker 0: delivered" in out
    assert job.result(timeout=60) == 1 and len(marks.read_text().splitlines()) == 1
    assert main(["jobs", "signal", job.job_id, "10", "--json"]) == 2  # ended: refused
    assert "SUCCEEDED" in capsys.readouterr().err


def test_a_multi_host_job_signals_one_worker_or_another(
    storage_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four real runners of one 4-worker job: ``worker=k`` reaches worker k's function
    only; each worker acks its own request."""
    slice_runs.register(monkeypatch)
    marks = tmp_path / "handled.txt"
    job = slice_runs.as_slice(
        kc.submit(
            signalfns.wait_for_signal,
            (str(marks),),
            target={"backend": "scripted", "env": {signals.POLL_ENV: "0.2"}},
        )
    )
    procs = [slice_runs.start_worker(storage_uri, job.job_id, k) for k in range(4)]
    try:
        until(lambda: signalfns.ready(str(marks)) == 4, "every worker's handler")
        req = job.send_signal("SIGUSR1", worker=2, wait=True, timeout=60)
        assert [(a.worker, a.delivered) for a in req.acks] == [(2, True)], req
        # delivered: the handler runs on the main thread's next bytecode, after the ack
        until(lambda: marks.exists() and marks.read_text().strip(), "worker 2's handler")
        assert len(marks.read_text().splitlines()) == 1  # worker 2's function only
        for k in (0, 1, 3):
            assert job.send_signal("USR1", worker=k, wait=True, timeout=60).delivered
        assert [slice_runs.finish(p)[0] for p in procs] == [0] * 4
    finally:
        for p in procs:
            p.kill()
    pids = {line.split()[1] for line in marks.read_text().splitlines()}
    assert len(pids) == 4  # one handler run in each worker's process
    assert job.result(timeout=60, cleanup=False) == 1
    with pytest.raises(kc.ConfigError, match="worker"):
        job.send_signal("USR1", worker=4)
