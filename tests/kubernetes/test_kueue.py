"""Queued admission by Kueue on the test cluster (issue 19, item 7): ``queue=`` makes the job
a suspended JobSet labelled for the LocalQueue; until Kueue admits it the job is PENDING
``Queued`` with Kueue's message (not ``Unschedulable``), then it runs; ``queue_timeout``
bounds only the wait for admission; a job cancelled while queued leaves nothing. Before
this change ``queue=`` was an unknown Target field (ConfigError)."""

from __future__ import annotations

import os
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

import kinetic_core as kc

sys.path.insert(0, str(Path(__file__).resolve().parent))
import k8s_fns
from test_backend import _backend
from test_multi_host import _objects
from test_reliability import _until

KUEUE = ("kueue.x-k8s.io", "v1beta1")
SLICE_SELECTOR = {
    "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
    "cloud.google.com/gke-tpu-topology": "4x4",
}


def _kueue_object(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "/".join(KUEUE), "kind": kind, "metadata": {"name": name}, "spec": spec}


def _quota(flavor: str, chips: int) -> dict[str, Any]:
    resources = [{"name": "google.com/tpu", "nominalQuota": chips}]
    return {
        "resourceGroups": [
            {
                "coveredResources": ["google.com/tpu"],
                "flavors": [{"name": flavor, "resources": resources}],
            }
        ]
    }


class Queue:
    """A LocalQueue over a ClusterQueue of ``chips`` TPU chips of the v5e slice."""

    def __init__(self, api: client.ApiClient, chips: int) -> None:
        self.custom = client.CustomObjectsApi(api)
        suffix = uuid.uuid4().hex[:6]
        self.flavor, self.cq, self.name = f"v5e-{suffix}", f"cq-{suffix}", f"lq-{suffix}"
        self.custom.create_cluster_custom_object(
            *KUEUE,
            "resourceflavors",
            _kueue_object("ResourceFlavor", self.flavor, {"nodeLabels": SLICE_SELECTOR}),
        )
        self.custom.create_cluster_custom_object(
            *KUEUE,
            "clusterqueues",
            _kueue_object("ClusterQueue", self.cq, _quota(self.flavor, chips)),
        )
        self.custom.create_namespaced_custom_object(
            *KUEUE,
            "default",
            "localqueues",
            _kueue_object("LocalQueue", self.name, {"clusterQueue": self.cq}),
        )

    def raise_quota(self, chips: int) -> None:
        self.custom.patch_cluster_custom_object(
            *KUEUE, "clusterqueues", self.cq, {"spec": _quota(self.flavor, chips)}
        )

    def workloads(self) -> list[dict[str, Any]]:
        items = self.custom.list_namespaced_custom_object(*KUEUE, "default", "workloads")["items"]
        return [w for w in items if w["spec"].get("queueName") == self.name]


def test_a_queued_job_reads_queued_then_runs_when_admitted(
    kube: kc.Target, k8s_api_client: client.ApiClient, tmp_path: Path
) -> None:
    queue = Queue(k8s_api_client, chips=8)  # a 16-chip slice does not fit
    target = kube.merge({"accelerator": "tpu-v5e-16", "queue": queue.name, "life_span": 600})
    job = kc.submit(k8s_fns.exchange_ranks, (str(tmp_path),), target=target)
    state = _until(
        "Kueue's message", lambda: "insufficient quota" in ((s := job.state()).message or "") and s
    )
    assert (state.status, state.reason) == (kc.JobStatus.PENDING, "Queued")
    assert f"LocalQueue {queue.name}" in (state.message or "")
    backend = _backend(target)
    (jobset,) = backend.client.call(
        "GET",
        backend.client.ns("jobsets"),
        query={"labelSelector": f"kinetic/job-id={job.job_id}"},
    )["items"]
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == queue.name
    assert jobset["spec"]["suspend"] is True
    assert not (tmp_path / "rank-0").exists()
    time.sleep(2)  # queued time that life_span must not count
    admitted_after = datetime.now(UTC).replace(microsecond=0)
    queue.raise_quota(16)
    views = job.result(timeout=180, cleanup=False)
    assert [v["index"] for v in views] == [0, 1, 2, 3]
    assert job.state().status is kc.JobStatus.SUCCEEDED
    # life_span (activeDeadlineSeconds of the child Jobs) starts at admission: the Jobs
    # were made once Kueue admitted the workload, never while it was queued
    children = backend.client.call(
        "GET", backend.client.ns("jobs"), query={"labelSelector": f"kinetic/job-id={job.job_id}"}
    )["items"]
    assert len(children) == 4
    for child in children:
        assert child["spec"]["activeDeadlineSeconds"] == 600
        made = datetime.fromisoformat(child["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
        assert made >= admitted_after


def test_a_queued_single_host_job_is_a_jobset_of_one_with_its_priority(
    kube: kc.Target, k8s_api_client: client.ApiClient
) -> None:
    queue = Queue(k8s_api_client, chips=16)
    client.CustomObjectsApi(k8s_api_client).create_cluster_custom_object(
        *KUEUE,
        "workloadpriorityclasses",
        {
            "apiVersion": "/".join(KUEUE),
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": f"high-{queue.name}"},
            "value": 1000,
        },
    )
    target = kube.merge(
        {"accelerator": "tpu-v5e-4", "queue": queue.name, "priority": f"high-{queue.name}"}
    )
    target = target.merge({"node_selector": SLICE_SELECTOR})  # the flavor's nodes
    job = kc.submit(k8s_fns.square, (7,), target=target)
    assert job.result(timeout=120, cleanup=False)["square"] == 49
    (workload,) = queue.workloads()
    assert workload["spec"]["priority"] == 1000
    assert workload["spec"]["podSets"][0]["count"] == 1


def test_queue_timeout_fails_a_job_never_admitted_and_deletes_everything(
    kube: kc.Target, k8s_api_client: client.ApiClient
) -> None:
    queue = Queue(k8s_api_client, chips=4)
    target = kube.merge(
        {
            "accelerator": "tpu-v5e-16",
            "queue": queue.name,
            "queue_timeout": 3,
            "signing_key": "k-queued",
        }
    )
    job = kc.submit(k8s_fns.square, (2,), target=target)
    state = job.wait(timeout=120)
    assert (state.status, state.reason) == (kc.JobStatus.FAILED, "QueueTimeout")
    assert "queue_timeout=3s" in (state.message or "")
    backend = _backend(target)
    _until("nothing of the job left", lambda: not _objects(backend, job.job_id) or None)
    _until("its Workload gone", lambda: not queue.workloads() or None)


def test_cancel_while_queued_leaves_nothing(
    kube: kc.Target, k8s_api_client: client.ApiClient
) -> None:
    queue = Queue(k8s_api_client, chips=4)
    target = kube.merge(
        {"accelerator": "tpu-v5e-16", "queue": queue.name, "signing_key": "k-queued"}
    )
    job = kc.submit(k8s_fns.square, (2,), target=target)
    _until("Queued", lambda: job.state().reason == "Queued")
    _until("its Workload", lambda: queue.workloads() or None)
    backend = _backend(target)
    assert set(_objects(backend, job.job_id)) == {"jobsets", "secrets"}
    job.cancel()
    assert job.state().status is kc.JobStatus.CANCELLED
    _until("nothing of the job left", lambda: not _objects(backend, job.job_id) or None)
    _until("its Workload gone", lambda: not queue.workloads() or None)


def test_queue_fields_resolve_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    env = {
        "KINETIC_BACKEND": "kubernetes",
        "KINETIC_QUEUE": "team-a",
        "KINETIC_PRIORITY": "high",
        "KINETIC_QUEUE_TIMEOUT": "86400",
    }
    target = kc.Target().resolve(environ=env)
    assert (target.queue, target.priority, target.queue_timeout) == ("team-a", "high", 86400.0)
    with pytest.raises(kc.ConfigError, match="queue must be a Kueue LocalQueue name"):
        kc.Target(backend="kubernetes", queue="no spaces").resolve(environ={})
    with pytest.raises(kc.ConfigError, match="set queue="):
        kc.Target(backend="kubernetes", queue_timeout=5).resolve(environ={})
    assert os.environ.get("KINETIC_QUEUE") is None
