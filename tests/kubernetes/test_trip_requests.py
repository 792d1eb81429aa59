"""What one round trip asks the API server (issue 37): no LIST after this process's own
write once the watch has its event, no poll once storage decides, no DELETE of what
cannot exist. Requests are counted at the client (what was sent), never timed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

import kinetic_core as kc
from kinetic_core.backends import get_backend
from kinetic_core.backends.kubernetes import KubernetesBackend
from kinetic_core.backends.kubernetes import watch as kube_watch
from kinetic_core.backends.kubernetes.client import KubeApiError, KubeClient
from kinetic_core.control.polling import poll_ticks

sys.path.insert(0, str(Path(__file__).resolve().parent))

import k8s_fns
from test_watch import fresh_watches  # noqa: F401 (autouse: each test starts its own watches)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, dict[str, Any]]]:
    """Every request any KubeClient of this process sends: (method, path, query)."""
    requests: list[tuple[str, str, dict[str, Any]]] = []
    original = KubeClient._request

    def counted(client: KubeClient, method: str, path: str, query: Any, *rest: Any) -> Any:
        requests.append((method, path, dict(query or {})))
        return original(client, method, path, query, *rest)

    monkeypatch.setattr(KubeClient, "_request", counted)
    return requests


def _backend(target: kc.Target) -> KubernetesBackend:
    backend = get_backend(target.resolve())
    assert isinstance(backend, KubernetesBackend)
    return backend


def _synced(backend: KubernetesBackend) -> None:
    for _ in poll_ticks(interval=0.2, timeout=60, describe=lambda: "the watch to sync"):
        backend.poll(["no-such-job"])
        watch = kube_watch.namespace_watch(backend.client)
        if watch is not None and watch.synced():
            return


def test_a_job_its_runner_decided_reads_from_storage_without_a_poll(
    kube: kc.Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once ``outcome.json`` decides the job (its runner's), its state needs no API call."""
    job = kc.submit(k8s_fns.square, (4,), target=kube)
    assert job.result(timeout=120, cleanup=False)["square"] == 16
    polled: list[list[str]] = []
    original = KubernetesBackend.poll

    def counted(self: KubernetesBackend, job_ids: list[str]) -> Any:
        polled.append(list(job_ids))
        return original(self, job_ids)

    monkeypatch.setattr(KubernetesBackend, "poll", counted)
    state = job.state()
    assert state.status is kc.JobStatus.SUCCEEDED
    assert state.ran is True
    assert polled == []
    job.cleanup()


def test_cleanup_of_a_plain_job_deletes_no_jobset_and_no_absent_secret(
    kube: kc.Target, sent: list[tuple[str, str, dict[str, Any]]]
) -> None:
    """A single-host job has no JobSet, and no Secret without a signing key: its cleanup
    deletes its Job only, in the foreground, which takes its pods (and lists no JobSet
    child Jobs). Before: a pods DELETE by label too, one request more per result()."""
    job = kc.submit(k8s_fns.square, (5,), target=kube)
    assert job.result(timeout=120, cleanup=False)["square"] == 25
    sent.clear()
    job.cleanup()
    backend = _backend(kube)
    deletes = [(m, p, q) for m, p, q in sent if m == "DELETE"]
    assert [(p, q.get("propagationPolicy")) for _, p, q in deletes] == [
        (backend.client.ns("jobs", f"kinetic-{job.job_id}"), "Foreground")
    ], deletes
    assert not [q for m, p, q in sent if m == "GET" and "jobset" in str(q)], sent
    for _ in poll_ticks(interval=0.2, timeout=60, describe=lambda: "the Job's pods to go"):
        if backend.job_pods(job.job_id) == []:
            break
    assert backend.job_pods(job.job_id) == []


def test_cleanup_of_a_job_whose_job_is_gone_deletes_its_pods_by_label(
    kube: kc.Target, sent: list[tuple[str, str, dict[str, Any]]]
) -> None:
    """Pods no Job owns any more (an orphaning deletion of the Job: ``kubectl delete job
    --cascade=orphan``) are deleted by their label."""
    job = kc.submit(k8s_fns.square, (7,), target=kube)
    assert job.result(timeout=120, cleanup=False)["square"] == 49
    backend = _backend(kube)
    path = backend.client.ns("jobs", f"kinetic-{job.job_id}")
    backend.client.call("DELETE", path, query={"propagationPolicy": "Orphan"})
    for _ in poll_ticks(interval=0.2, timeout=60, describe=lambda: "the Job to go, alone"):
        try:
            backend.client.call("GET", path)
        except KubeApiError as exc:
            assert exc.status == 404
            break
    assert backend.job_pods(job.job_id) != []
    sent.clear()
    job.cleanup()
    assert any(m == "DELETE" and p.endswith("/pods") for m, p, _ in sent), sent
    for _ in poll_ticks(interval=0.2, timeout=60, describe=lambda: "the orphaned pods to go"):
        if all(p["metadata"].get("deletionTimestamp") for p in backend.job_pods(job.job_id)):
            break
    assert all(p["metadata"].get("deletionTimestamp") for p in backend.job_pods(job.job_id))


def test_cleanup_of_a_signed_job_deletes_its_secret(
    kube: kc.Target, sent: list[tuple[str, str, dict[str, Any]]]
) -> None:
    """A job with a signing key has a Secret: its cleanup deletes it."""
    target = kube.merge({"signing_key": "k" * 32})
    job = kc.submit(k8s_fns.square, (6,), target=target)
    assert job.result(timeout=120, cleanup=False)["square"] == 36
    sent.clear()
    job.cleanup()
    assert any(m == "DELETE" and "/secrets/" in p for m, p, _ in sent), sent
    backend = _backend(target)
    secrets = backend.client.call("GET", backend.client.ns("secrets"))["items"]
    assert f"kinetic-{job.job_id}" not in {s["metadata"]["name"] for s in secrets}


def test_polls_after_this_process_launched_a_job_read_the_watch(
    kube: kc.Target, sent: list[tuple[str, str, dict[str, Any]]]
) -> None:
    """The polls right after this process's own launch answer from the watch once it has
    the launch's event (they LISTed for 2 s after every write: 20-24 LISTs a trip)."""
    backend = _backend(kube)
    _synced(backend)
    job = kc.submit(k8s_fns.sleep, (30,), target=kube)
    try:
        sent.clear()
        for _ in range(10):
            backend.poll([job.job_id])
        lists = [(p, q) for m, p, q in sent if m == "GET" and "labelSelector" in q]
        assert len(lists) <= 4, lists  # 20 before: every poll LISTed Jobs and Pods
    finally:
        job.cancel(wait=0)
