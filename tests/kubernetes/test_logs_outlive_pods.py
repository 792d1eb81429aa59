"""A Kubernetes job's log outlives its pod: the runner keeps its output in storage as it
runs, and the backend reads the pod while it exists and storage once it is gone, with one
cursor across both (issue 20, item 1)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

import kinetic_core as kc
from kinetic_core.backends import get_backend
from kinetic_core.backends.kubernetes import KubernetesBackend, job_name
from kinetic_core.cli import main
from kinetic_core.control.logs import LogStream
from kinetic_core.control.polling import poll_ticks

sys.path.insert(0, str(Path(__file__).resolve().parent))
import log_fns


@pytest.fixture
def target(kube: kc.Target) -> kc.Target:
    return kube.merge({"pickle_by_value": ["k8s_fns", "log_fns"]})


def _backend(target: kc.Target) -> KubernetesBackend:
    backend = get_backend(target.resolve())
    assert isinstance(backend, KubernetesBackend)
    return backend


def _pods(backend: KubernetesBackend, job_id: str) -> list[dict[str, Any]]:
    return backend.client.call(  # type: ignore[no-any-return]
        "GET", backend.client.ns("pods"), query={"labelSelector": f"kinetic/job-id={job_id}"}
    )["items"]


def _job_exists(backend: KubernetesBackend, job_id: str) -> bool:
    jobs = backend.client.call("GET", backend.client.ns("jobs"))["items"]
    return any(j["metadata"]["name"] == job_name(job_id) for j in jobs)


def _wait_gone(backend: KubernetesBackend, job_id: str, pod: str | None = None) -> None:
    """Until the Job and its pods (or only ``pod``) are gone from the API."""

    def gone() -> bool:
        names = [p["metadata"]["name"] for p in _pods(backend, job_id)]
        if pod is not None:
            return pod not in names
        return not names and not _job_exists(backend, job_id)

    for _ in poll_ticks(interval=0.3, timeout=90, describe=lambda: f"pods of {job_id} gone"):
        if gone():
            return


def _read_all(job: kc.JobHandle, cursor: str | None = None) -> tuple[str, str | None]:
    text = ""
    while True:
        chunk, cursor = job.read_logs(cursor)
        if not chunk:
            return text, cursor
        text += chunk


def test_logs_outlive_result_cleanup(target: kc.Target, capsys: pytest.CaptureFixture[str]) -> None:
    job = kc.submit(log_fns.print_lines, (60,), target=target)
    assert job.result(timeout=120) == 60  # cleans up: the Job and its pod are deleted
    backend = _backend(target)
    _wait_gone(backend, job.job_id)
    expected = [f"line {i}" for i in range(60)]
    assert [ln for ln in job.logs().splitlines() if ln.startswith("line")] == expected
    again = kc.attach(job.job_id)
    assert again.logs(tail=2).splitlines() == ["line 58", "line 59"]
    text, _ = _read_all(again)  # a follower that starts once the pod is gone
    assert [ln for ln in text.splitlines() if ln.startswith("line")] == expected
    assert main(["jobs", "logs", job.job_id]) == 0
    out = capsys.readouterr().out
    assert [ln for ln in out.splitlines() if ln.startswith("line")] == expected


def test_failure_message_keeps_its_log_tail_once_the_pod_is_deleted(target: kc.Target) -> None:
    job = kc.submit(log_fns.print_then_fail, (30,), target=target)
    assert job.wait(timeout=120).status is kc.JobStatus.FAILED
    job.cleanup(storage=False)  # the Job and its pod go; the result stays
    _wait_gone(_backend(target), job.job_id)
    with pytest.raises(RuntimeError) as info:
        job.result(timeout=10)
    message = kc.describe_failure(job, info.value)
    assert "the nightly run failed" in message
    assert "step 29" in message and "step 28" in message


def test_a_follower_gets_each_line_once_across_the_pods_deletion(
    target: kc.Target, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    job = kc.submit(log_fns.print_gated, (80, str(gate)), target=target)
    stream = LogStream(job, interval=0.3, timeout=120)
    lines = iter(stream)
    seen = [next(lines) for _ in range(40)]  # the first half, read from the pod
    gate.touch()
    assert job.wait(timeout=120).status is kc.JobStatus.SUCCEEDED
    backend = _backend(target)
    backend.delete(job.job_id)
    _wait_gone(backend, job.job_id)
    seen.extend(lines)  # the same follower goes on: the rest comes from storage
    assert [ln for ln in seen if ln.startswith("line")] == [f"line {i}" for i in range(80)]
    assert (stream.cursor or "").startswith("storage|")  # it did switch sources


def test_sigterm_flushes_the_last_lines(target: kc.Target, tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    job = kc.submit(
        log_fns.print_then_sleep,
        (25, str(ready), 300),
        # No periodic flush during the test: only the end of the runner can store the lines.
        target=target.merge({"env": {"KINETIC_LOG_FLUSH_SECONDS": "3600"}}),
    )
    for _ in poll_ticks(interval=0.2, timeout=120, describe=lambda: "the job's lines"):
        if ready.exists():
            break
    backend = _backend(target)
    [pod] = [p["metadata"]["name"] for p in _pods(backend, job.job_id)]
    backend.client.call(
        "DELETE", backend.client.ns("pods", pod), body={"gracePeriodSeconds": 30}
    )  # as a node drain or spot reclaim's graceful shutdown does
    _wait_gone(backend, job.job_id, pod)
    text = job.logs()
    assert [ln for ln in text.splitlines() if ln.startswith("line")] == [
        f"line {i}" for i in range(25)
    ]
    assert "SIGTERM received" in text
    job.cancel()
