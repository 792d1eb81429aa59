"""``debug=True`` on the test cluster: a failed job's pod stays Running (the runner holds
its container) after the job reads FAILED, the CLI prints the kubectl exec line, and
cleanup deletes the pod."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

import kinetic_core as kc
from kinetic_core.backends import get_backend
from kinetic_core.backends.kubernetes import KubeApiError, KubernetesBackend, job_name
from kinetic_core.cli import main
from kinetic_core.control.polling import poll_ticks
from kinetic_core.runtime import debugging
from kinetic_core.storage import open_storage

sys.path.insert(0, str(Path(__file__).resolve().parent))
import k8s_fns


def _backend(target: kc.Target) -> KubernetesBackend:
    backend = get_backend(target.resolve())
    assert isinstance(backend, KubernetesBackend)
    return backend


def _pods(backend: KubernetesBackend, job_id: str) -> list[dict[str, Any]]:
    return backend.client.call(  # type: ignore[no-any-return]
        "GET", backend.client.ns("pods"), query={"labelSelector": f"kinetic/job-id={job_id}"}
    )["items"]


def _job(backend: KubernetesBackend, job_id: str) -> dict[str, Any] | None:
    try:
        return backend.client.call("GET", backend.client.ns("jobs", job_name(job_id)))  # type: ignore[no-any-return]
    except KubeApiError as exc:
        if exc.status == 404:
            return None
        raise


def test_a_failed_debug_pod_stays_running_until_cleanup(
    kube: kc.Target, capsys: pytest.CaptureFixture[str]
) -> None:
    target = kube.merge({"life_span": 120})
    job = kc.submit(k8s_fns.exit_with, (3,), target=target, debug=True)
    state = job.wait(timeout=120)
    assert state.status is kc.JobStatus.FAILED and state.exit_code == 3
    backend = _backend(kube)
    manifest = _job(backend, job.job_id)
    assert manifest is not None
    assert manifest["spec"]["activeDeadlineSeconds"] == 120 + debugging.DEBUG_HOLD
    pods = _pods(backend, job.job_id)
    assert [p["status"]["phase"] for p in pods] == ["Running"]  # held after FAILED
    again = job.state()  # a held pod is not read RUNNING, and starts no recovery
    assert (again.status, again.job_id) == (kc.JobStatus.FAILED, job.job_id)

    info = debugging.read(open_storage(job.storage), job.job_id)
    assert info is not None
    pod = pods[0]["metadata"]["name"]
    assert (info["pod"], info["namespace"], info["container"]) == (pod, "default", "runner")
    capsys.readouterr()
    assert main(["jobs", "status", job.job_id]) == 1
    assert f"kubectl exec -it -n default {pod} -c runner -- bash" in capsys.readouterr().out

    job.cleanup()
    for _ in poll_ticks(interval=0.5, timeout=90, describe=lambda: "the held pod to go"):
        if not _pods(backend, job.job_id) and _job(backend, job.job_id) is None:
            break
    assert _pods(backend, job.job_id) == [] and _job(backend, job.job_id) is None
    assert kc.attach(job.job_id).state().status is kc.JobStatus.FAILED


def test_a_debug_hold_goes_with_its_killed_pod_and_with_cleanup(
    kube: kc.Target, capsys: pytest.CaptureFixture[str]
) -> None:
    """A held job's pod killed (deleted at once, no SIGTERM to release the hold): the hold
    record goes with it, so ``kinetic jobs status`` no longer sends anyone to ``kubectl
    exec`` into a pod that is gone, and nothing of it is left after ``cleanup()`` (issue
    34, item 7; before: the status said it was kept Running, for 24 h)."""
    job = kc.submit(k8s_fns.exit_with, (3,), target=kube, debug=True)
    assert job.wait(timeout=120).status is kc.JobStatus.FAILED
    backend = _backend(kube)
    (pod,) = _pods(backend, job.job_id)
    capsys.readouterr()
    main(["jobs", "status", job.job_id])
    assert "kubectl exec" in capsys.readouterr().out  # held: its pod runs
    backend.client.call(
        "DELETE", backend.client.ns("pods", pod["metadata"]["name"]), body={"gracePeriodSeconds": 0}
    )

    def released() -> bool:
        capsys.readouterr()
        main(["jobs", "status", job.job_id])
        return "kubectl exec" not in capsys.readouterr().out

    for _ in poll_ticks(interval=0.5, timeout=90, describe=lambda: "the hold to go with its pod"):
        if released():
            break
    assert job.debug_hold() is None
    assert debugging.read(open_storage(job.storage), job.job_id) is None
    job.cleanup()
    assert debugging.read(open_storage(job.storage), job.job_id) is None
    assert kc.attach(job.job_id).state().status is kc.JobStatus.FAILED
