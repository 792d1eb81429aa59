"""Defects of the Kubernetes backend reproduced against the test cluster (issue 12, section 0).

Each test drives a real fault: a lost pod status update, an API server outage, a deleted
pod or Job, an unreachable node, a wrong CA, a rejected Job, a node agent restart.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tenacity import stop_after_attempt, wait_none

import kinetic_core as kc
from kinetic_core.backends.kubernetes import KubernetesBackend, job_name
from kinetic_core.backends.kubernetes import client as kube_client
from kinetic_core.backends.kubernetes import states as kube_states
from kinetic_core.control.polling import poll_ticks, shared_poller
from kinetic_core.util.ids import keyed_id

sys.path.insert(0, str(Path(__file__).resolve().parent))
import k8s_fns
from test_backend import _backend, _get, _patch_status_seen, _pods

NOWHERE = {"node_selector": {"kubernetes.io/hostname": "nowhere"}}


def _until(what: str, check: Any, timeout: float = 90) -> Any:
    """Poll ``check`` until it returns something truthy (WaitTimeout names ``what``)."""
    for _ in poll_ticks(interval=0.3, timeout=timeout, describe=lambda: what):
        value = check()
        if value:
            return value
    return None


def _running(job: kc.JobHandle) -> None:
    _until(f"{job.job_id} to run", lambda: job.status() is kc.JobStatus.RUNNING)


def _pod_of(backend: KubernetesBackend, job_id: str) -> dict[str, Any]:
    pods: list[dict[str, Any]] = _until("a pod", lambda: _pods(backend, job_id))
    return pods[0]


RUNNING_POD = {
    "phase": "Running",
    "conditions": [{"type": "Ready", "status": "True"}],
    "containerStatuses": [
        {
            "name": "runner",
            "image": "x",
            "imageID": "",
            "ready": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
        }
    ],
}


# ---- 1. storage evidence beats a stale backend phase -------------------------------------


def test_finished_in_storage_beats_a_pod_stuck_running(kube: kc.Target) -> None:
    """The pod's final status update was lost: the API says Running forever, storage has
    the result. The job is SUCCEEDED (and its value returned), not RUNNING."""
    backend = _backend(kube)
    job = kc.submit(k8s_fns.square, (6,), target=kube.merge(NOWHERE))
    pod = _pod_of(backend, job.job_id)
    _patch_status_seen(backend, pod["metadata"]["name"], RUNNING_POD)
    assert job.state().status is kc.JobStatus.RUNNING
    # The runner runs to the end (here, outside any pod), but nobody tells the API.
    subprocess.run(
        [
            sys.executable,
            "-m",
            "kinetic_core.runtime.runner",
            "--storage",
            job.storage,
            "--job-id",
            job.job_id,
        ],
        check=True,
        timeout=120,
    )
    assert backend.poll([job.job_id])[job.job_id].phase == "running"  # still stale
    state = job.state()
    assert (state.status, state.reason) == (kc.JobStatus.SUCCEEDED, None)
    assert job.result(timeout=30)["square"] == 36


# ---- 2. an API server outage is ridden out -----------------------------------------------


def test_waiters_ride_out_an_api_server_outage(
    kube: kc.Target, k8s_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sync and async waiters keep waiting through an outage longer than the client's
    retries, and see the job succeed once the API server is back."""
    monkeypatch.setattr(
        kube_client,
        "API_RETRY",
        kube_client.API_RETRY.copy(stop=stop_after_attempt(2), wait=wait_none()),
    )
    job = kc.submit(k8s_fns.sleep, (12,), target=kube)
    _running(job)
    results: dict[str, Any] = {}

    def sync_waiter() -> None:
        try:
            results["sync"] = job.wait(timeout=240).status
        except BaseException as exc:
            results["sync"] = exc

    async def async_waiter() -> Any:
        return (await shared_poller().wait(job, timeout=240)).status

    def async_thread() -> None:
        try:
            results["async"] = asyncio.run(async_waiter())
        except BaseException as exc:
            results["async"] = exc

    threads = [threading.Thread(target=t) for t in (sync_waiter, async_thread)]
    for t in threads:
        t.start()
    with k8s_cluster.control_plane_outage():
        time.sleep(6)  # several polls fail, each after the (shortened) retries
    for t in threads:
        t.join(timeout=240)
    assert results == {"sync": kc.JobStatus.SUCCEEDED, "async": kc.JobStatus.SUCCEEDED}


def test_outage_past_the_timeout_is_a_kinetic_error(
    kube: kc.Target, k8s_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        kube_client,
        "API_RETRY",
        kube_client.API_RETRY.copy(stop=stop_after_attempt(1), wait=wait_none()),
    )
    job = kc.submit(k8s_fns.sleep, (30,), target=kube)
    _running(job)
    with k8s_cluster.control_plane_outage(), pytest.raises(kc.WaitTimeout, match="wait again"):
        job.wait(timeout=3)
    job.cancel()


# ---- 3. a deleted pod does not run the function again ------------------------------------


def test_deleting_the_pod_does_not_rerun_the_function(kube: kc.Target, tmp_path: Path) -> None:
    backend = _backend(kube)
    runs = tmp_path / "runs.txt"
    job = kc.submit(k8s_fns.record_run, (str(runs), 4), target=kube)
    _until("the first run", lambda: runs.exists() and runs.read_text())
    first = _pods(backend, job.job_id)[0]["metadata"]["name"]
    backend.client.call("DELETE", backend.client.ns("pods", first), body={"gracePeriodSeconds": 0})
    state = job.wait(timeout=120)
    # The Job controller made a replacement pod; it must not have run the function.
    _until("the replacement pod", lambda: len(_pods(backend, job.job_id)) >= 1)
    assert len(runs.read_text().splitlines()) == 1
    assert state.status is kc.JobStatus.FAILED and state.reason == "Lost"
    assert "more than once" in (state.message or "")


# ---- 4. a lost node is detected ------------------------------------------------------------


def test_pod_on_an_unreachable_node_is_lost(kube: kc.Target, k8s_cluster: Any) -> None:
    """The target's lost_grace (here 2 s, default 120) is how long the node may be
    unreachable before the job reads Lost."""
    backend = _backend(kube)
    target = kube.merge({"accelerator": "gpu-l4", "lost_grace": 2})
    job = kc.submit(k8s_fns.sleep, (300,), target=target)
    _running(job)
    node = _pod_of(backend, job.job_id)["spec"]["nodeName"]
    k8s_cluster.agent_control("lose-node", node=node)
    try:
        state = job.wait(timeout=60)
    finally:
        k8s_cluster.agent_control("restore-node", node=node)
    assert state.status is kc.JobStatus.FAILED and state.reason == "Lost"
    assert node in (state.message or "") and "unreachable" in (state.message or "")
    job.cleanup()


def test_node_state_translation_fixtures() -> None:
    """Without a cluster: what a pod on a troubled node reads, before and after the grace."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    pod = {
        "metadata": {},
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]},
    }
    job = {"status": {"active": 1}}
    unknown = {
        "status": {
            "conditions": [
                {"type": "Ready", "status": "Unknown", "lastTransitionTime": now, "message": "gone"}
            ]
        }
    }
    tainted = {
        "spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "timeAdded": now}]},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }
    fine = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert kube_states.job_state(job, [pod], {"n1": fine}).reason is None
    for node in (unknown, tainted):
        state = kube_states.job_state(job, [pod], {"n1": node})
        assert (state.phase, state.reason) == ("running", "NodeUnreachable"), node
        assert "node n1 unreachable" in (state.message or "")
    assert kube_states.job_state(job, [pod], {"n1": unknown}, lost_grace=-1.0).phase == "gone"
    assert kube_states.job_state(job, [pod], {}, lost_grace=-1.0).phase == "running"  # unread


# ---- 5. the signing-key Secret: taken back with a refused Job, found by its label -----------


def test_rejected_job_leaves_no_secret(kube: kc.Target) -> None:
    backend = _backend(kube)
    target = kube.merge({"signing_key": "k3y", "resources": {"cpu": "abc"}})
    key = f"bad-cpu-{os.urandom(4).hex()}"
    with pytest.raises(kc.SubmissionError, match="rejected"):
        kc.submit(k8s_fns.square, (1,), target=target, name="bad-cpu", idempotency_key=key)
    secrets = backend.client.call(
        "GET",
        backend.client.ns("secrets"),
        query={"labelSelector": f"kinetic/job-id={keyed_id(key, 1)}"},
    )["items"]
    assert secrets == []


def test_secret_is_owned_by_its_job_from_its_creation(
    kube: kc.Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Job comes first, then its Secret, created owned by it (issue 34): a submitter
    dying right after the Secret's create leaves a Job and a Secret that goes with it
    (the Job's TTL, or any delete of it, removes the Secret); cancel/cleanup find both by
    the job's label. A whole submit leaves a Secret owned by its Job."""
    target = kube.merge({"signing_key": "k3y"})
    backend = _backend(target)
    real_call = backend.client.call
    created: list[str] = []

    def call(method: str, path: str, **kw: Any) -> Any:
        answer = real_call(method, path, **kw)
        if method == "POST" and path.endswith("/secrets"):
            created.append(answer["metadata"]["name"])
            raise KeyboardInterrupt  # the submitter dies on the next line
        return answer

    with monkeypatch.context() as patched, pytest.raises(KeyboardInterrupt):
        patched.setattr(backend.client, "call", call)
        kc.submit(k8s_fns.square, (1,), target=target)
    [name] = created
    secret = _get(backend, "secrets", name)
    assert secret is not None and _get(backend, "jobs", name) is not None
    assert [o["kind"] for o in secret["metadata"].get("ownerReferences", [])] == ["Job"]
    job_id = secret["metadata"]["labels"]["kinetic/job-id"]
    backend.cancel(job_id)
    assert _get(backend, "secrets", name) is None

    job = kc.submit(k8s_fns.square, (1,), target=target)
    secret = _get(backend, "secrets", job_name(job.job_id))
    assert secret is not None
    assert [o["kind"] for o in secret["metadata"].get("ownerReferences", [])] == ["Job"]
    assert job.result(timeout=120)["square"] == 1


# ---- 6. a Job deleted by someone else is Lost at once --------------------------------------


def test_job_deleted_by_someone_else_is_lost_once_its_pods_are_gone(kube: kc.Target) -> None:
    """Lost means no process of the job is alive: while the deleted Job's pod is still
    stopping the job reads RUNNING (Terminating), then Lost as soon as the pod is gone."""
    backend = _backend(kube)
    job = kc.submit(k8s_fns.sleep, (300,), target=kube)
    _running(job)
    backend.client.call(
        "DELETE",
        backend.client.ns("jobs", job_name(job.job_id)),
        body={"propagationPolicy": "Background"},
    )
    _until("the Job to go", lambda: _get(backend, "jobs", job_name(job.job_id)) is None)
    _until("its pods to go", lambda: not _pods(backend, job.job_id))
    state = job.state()
    assert (state.status, state.reason) == (kc.JobStatus.FAILED, "Lost")
    assert "deleted" in (state.message or "")


# ---- 7. a TLS verification failure is a configuration error --------------------------------


def test_wrong_ca_is_a_config_error_naming_the_ca(
    kube: kc.Target, k8s_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cluster import pki

    (tmp_path / "other-ca").mkdir()
    other_ca = pki.CertAuthority(tmp_path / "other-ca")
    config = json.loads(Path(k8s_cluster.kubeconfig_path).read_text())
    config["clusters"][0]["cluster"]["certificate-authority"] = str(other_ca.cert_path)
    bad = tmp_path / "kubeconfig"
    bad.write_text(json.dumps(config))
    monkeypatch.setenv("KUBECONFIG", str(bad))
    backend = KubernetesBackend(kube.resolve())
    attempts: list[int] = []
    real = backend.client._request

    def counting(*args: Any) -> Any:
        attempts.append(1)
        return real(*args)

    monkeypatch.setattr(backend.client, "_request", counting)
    with pytest.raises(kc.ConfigError, match=r"TLS.*kinetic-test") as info:
        backend.poll(["some-job"])
    assert len(attempts) == 1  # not retried as if transient
    assert "certificate" in str(info.value).lower()


# ---- 8. a poll costs O(watched jobs) -------------------------------------------------------


def test_poll_reads_only_the_watched_jobs(kube: kc.Target, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = _backend(kube)
    target = kube.merge(NOWHERE)
    others = [kc.submit(k8s_fns.sleep, (0,), target=target, name=f"other-{i}") for i in range(12)]
    watched = kc.submit(k8s_fns.sleep, (0,), target=target, name="watched")
    _pod_of(backend, watched.job_id)
    real_call = backend.client.call
    objects: list[int] = []

    def counting(method: str, path: str, **kw: Any) -> Any:
        answer = real_call(method, path, **kw)
        objects.append(len(answer.get("items", [answer])) if isinstance(answer, dict) else 0)
        return answer

    monkeypatch.setattr(backend.client, "call", counting)
    states = backend.poll([watched.job_id])
    monkeypatch.undo()
    assert states[watched.job_id].phase == "pending"
    assert sum(objects) <= 2  # the watched Job and its pod, not the 26 objects present
    for job in [*others, watched]:
        job.cleanup(storage=False, cancel=True)  # still pending


# ---- the node agent does not hide these ---------------------------------------------------


def test_agent_retries_a_failed_final_status_update(kube: kc.Target, k8s_cluster: Any) -> None:
    backend = _backend(kube)
    k8s_cluster.agent_control("fail-status-updates", count=1)
    job = kc.submit(k8s_fns.square, (3,), target=kube)
    assert job.wait(timeout=120).status is kc.JobStatus.SUCCEEDED
    phase = _until(
        "the pod's final phase",
        lambda: {p["status"].get("phase") for p in _pods(backend, job.job_id)} == {"Succeeded"},
        timeout=60,
    )
    assert phase


def test_agent_restart_reconciles_pods_it_did_not_start(kube: kc.Target, k8s_cluster: Any) -> None:
    backend = _backend(kube)
    job = kc.submit(k8s_fns.sleep, (300,), target=kube)
    _running(job)
    k8s_cluster.restart_node_agent()
    pod = _until(
        "the orphaned pod to be reported",
        lambda: [
            p
            for p in _pods(backend, job.job_id)
            if p["status"].get("phase") in ("Failed", "Succeeded")
        ],
        timeout=60,
    )[0]
    assert pod["status"]["phase"] == "Failed"
    assert "restarted" in json.dumps(pod["status"]["containerStatuses"])
    state = job.wait(timeout=60)
    assert state.status is kc.JobStatus.FAILED
