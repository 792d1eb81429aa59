"""Multi-host slices on the test cluster (issue 19, items 3, 4, 6): a ``tpu-v5e-16`` job is
ONE JobSet of 4 workers on the 4 nodes of the v5e 4x4 slice; its workers learn their rank
from the environment, worker 0's value is the result, one failing worker fails the job and
stops the others, cancel leaves nothing, and a reclaim of worker 2 recovers the whole slice
once. Before the JobSet backend each submit was a ConfigError ("multi-host slices need
JobSet ... not in this version")."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from cluster.cluster import SLICE_NODE_NAMES

import kinetic_core as kc

sys.path.insert(0, str(Path(__file__).resolve().parent))
import k8s_fns
from test_backend import _backend
from test_reliability import _until
from test_spot_reclaim import _lines, _observers

from kinetic_core.backends.kubernetes import jobset as jobset_module
from kinetic_core.backends.kubernetes.manifest import job_name

SLICE = "tpu-v5e-16"
JOBSET_PATH = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"


@pytest.fixture
def tpu(kube: kc.Target) -> kc.Target:
    return kube.merge({"accelerator": SLICE})


def _objects(backend: Any, job_id: str) -> dict[str, list[str]]:
    """Every object of the job left in the namespace, by kind."""
    selector = {"labelSelector": f"kinetic/job-id={job_id}"}
    call, ns = backend.client.call, backend.client.ns
    name = job_name(job_id)
    out = {
        kind: [o["metadata"]["name"] for o in call("GET", ns(kind), query=selector)["items"]]
        for kind in ("jobsets", "jobs", "pods", "secrets")
    }
    services = call("GET", ns("services"))["items"]
    out["services"] = [s["metadata"]["name"] for s in services if s["metadata"]["name"] == name]
    return {k: v for k, v in out.items() if v}


def _live_pods(backend: Any, job_id: str) -> list[dict[str, Any]]:
    pods = backend.client.call(
        "GET", backend.client.ns("pods"), query={"labelSelector": f"kinetic/job-id={job_id}"}
    )["items"]
    return [p for p in pods if p["status"].get("phase") in ("Pending", "Running")]


def test_four_workers_exchange_their_rank_and_worker_0_returns(
    tpu: kc.Target, tmp_path: Path
) -> None:
    job = kc.submit(k8s_fns.exchange_ranks, (str(tmp_path),), target=tpu)
    views = job.result(timeout=180, cleanup=False)
    name = job_name(job.job_id)
    hosts = [f"{name}-workers-{i}-0.{name}" for i in range(4)]
    assert [v["index"] for v in views] == [0, 1, 2, 3]
    assert [v["env_index"] for v in views] == ["0", "1", "2", "3"]
    assert {v["count"] for v in views} == {4}
    assert all(v["hostnames"] == hosts for v in views)
    assert {v["coordinator"] for v in views} == {f"{hosts[0]}:8476"}
    backend = _backend(tpu)
    (jobset,) = backend.client.call(
        "GET", backend.client.ns("jobsets"), query={"labelSelector": f"kinetic/job-id={job.job_id}"}
    )["items"]
    assert jobset["metadata"]["name"] == name
    spec = jobset["spec"]
    assert spec["failurePolicy"] == {"maxRestarts": 0}
    assert spec["network"] == {"enableDNSHostnames": True, "subdomain": name}
    (workers,) = spec["replicatedJobs"]
    assert (workers["name"], workers["replicas"]) == ("workers", 4)
    child = workers["template"]["spec"]
    assert (child["parallelism"], child["completions"], child["backoffLimit"]) == (1, 1, 0)
    pods = backend.client.call(
        "GET", backend.client.ns("pods"), query={"labelSelector": f"kinetic/job-id={job.job_id}"}
    )["items"]
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(SLICE_NODE_NAMES)
    assert all(
        p["spec"]["containers"][0]["resources"]["limits"]["google.com/tpu"] == "4" for p in pods
    )
    assert job.state().status is kc.JobStatus.SUCCEEDED


def test_one_failing_worker_fails_the_job_and_stops_the_others(
    tpu: kc.Target, tmp_path: Path
) -> None:
    job = kc.submit(k8s_fns.one_worker_fails, (str(tmp_path), 1), target=tpu)
    state = job.wait(timeout=180)
    assert (state.status, state.exit_code) == (kc.JobStatus.FAILED, 3)
    assert "worker 1" in (state.message or ""), state
    backend = _backend(tpu)
    _until("the other workers stopped", lambda: not _live_pods(backend, job.job_id))


def test_cancel_stops_every_worker_and_leaves_nothing(tpu: kc.Target, tmp_path: Path) -> None:
    target = tpu.merge({"signing_key": "a-key-for-the-slice"})
    job = kc.submit(k8s_fns.all_workers_sleep, (str(tmp_path),), target=target)
    _until("every worker running", lambda: all((tmp_path / f"pid-{i}").exists() for i in range(4)))
    assert job.state().status is kc.JobStatus.RUNNING
    backend = _backend(target)
    assert set(_objects(backend, job.job_id)) == {"jobsets", "jobs", "pods", "secrets", "services"}
    job.cancel()
    _until("nothing of the job left", lambda: not _objects(backend, job.job_id) or None)
    assert job.state().status is kc.JobStatus.CANCELLED


def test_a_reclaim_of_worker_2_recovers_the_whole_slice_once(
    tpu: kc.Target, k8s_cluster: Any, tmp_path: Path
) -> None:
    """Node of worker 2 reclaimed mid-run: Preempted, then one next attempt of all four
    workers resuming from worker 0's checkpoint, however many observers (10) resolve it."""
    work = tmp_path / "work"
    work.mkdir()
    target = tpu.merge({"max_recoveries": 1})
    job = kc.submit(
        k8s_fns.slice_resumable, (str(work),), target=target, idempotency_key=f"s-{uuid.uuid4()}"
    )
    _until("worker 0 half-way", lambda: (work / "halfway").exists())
    _until("every worker started", lambda: len(_lines(work / "starts")) == 4)
    backend = _backend(target)
    pods = backend.client.call(
        "GET", backend.client.ns("pods"), query={"labelSelector": f"kinetic/job-id={job.job_id}"}
    )["items"]
    (node,) = [
        p["spec"]["nodeName"]
        for p in pods
        if p["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"] == "2"
    ]
    k8s_cluster.delete_node(node, grace=5)
    k8s_cluster.restore_node(node)  # the autoscaler's replacement VM
    procs = _observers(job.job_id, 10)
    states = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    successor = job.state().job_id
    assert {(s["status"], s["job_id"], s["attempt"]) for s in states} == {
        ("SUCCEEDED", successor, 2)
    }
    assert job.result(timeout=60, cleanup=False) == {"resumed_from": 5, "job_id": successor}
    expected = [f"{job.job_id} 0 0", f"{successor} 0 5"]
    expected += [f"{j} {i}" for j in (job.job_id, successor) for i in (1, 2, 3)]
    assert sorted(_lines(work / "starts")) == sorted(expected)
    ends = [(t.attempt, t.status.value, t.reason) for t in job.history() if t.status.terminal]
    assert ends == [(1, "FAILED", "Preempted"), (2, "SUCCEEDED", None)]
    store = Path(os.environ["KINETIC_STORAGE"][len("file://") :])
    assert sorted(os.listdir(store / "jobs")) == sorted([job.job_id, successor])


def test_a_server_without_jobset_is_a_config_error_before_anything_is_made(
    tpu: kc.Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Discovery is asked for a group the server does not serve (as on a cluster without
    the JobSet controller): a ConfigError saying to install JobSet, nothing written."""
    monkeypatch.setattr(jobset_module, "GROUP", "jobset.not-served.example")
    from kinetic_core.backends import _backends

    _backends.clear()  # a fresh client: discovery is cached per client
    with pytest.raises(kc.ConfigError, match="install the JobSet controller") as info:
        kc.submit(k8s_fns.square, (2,), target=tpu)
    assert jobset_module.INSTALL_DOCS in str(info.value)
    assert "4 hosts" in str(info.value)
    store = Path(os.environ["KINETIC_STORAGE"][len("file://") :])
    assert not (store / "jobs").exists() or not os.listdir(store / "jobs")
    _backends.clear()


def test_a_worker_that_cannot_be_scheduled_keeps_the_gang_pending_until_schedule_timeout(
    tpu: kc.Target,
) -> None:
    target = tpu.merge({"node_selector": {"kinetic-test/no-such-pool": "x"}, "schedule_timeout": 4})
    job = kc.submit(k8s_fns.square, (2,), target=target)
    state = _until("Unschedulable", lambda: (s := job.state()).reason == "Unschedulable" and s)
    assert state.status is kc.JobStatus.PENDING
    assert (state.message or "").startswith("worker ")
    ended = job.wait(timeout=120)
    assert (ended.status, ended.reason) == (kc.JobStatus.FAILED, "ScheduleTimeout")
    _until("nothing of the job left", lambda: not _objects(_backend(target), job.job_id) or None)


def test_polling_multi_host_jobs_costs_the_same_requests_for_1_or_10(
    tpu: kc.Target, k8s_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """O(watched jobs): one poll of JobSet jobs is one LIST each of Jobs, Pods, JobSets and
    (while queued) Workloads per namespace, whether it watches 1 or 10 (audit log)."""
    monkeypatch.setenv("KINETIC_K8S_WATCH", "0")  # the LIST fallback (the watch: test_watch.py)
    from kinetic_core.backends.kubernetes import USER_AGENT, KubernetesBackend

    queued = tpu.merge({"queue": "no-such-queue-here"})
    jobs = [kc.submit(k8s_fns.square, (i,), target=queued) for i in range(10)]
    kinds = ("jobs", "pods", "jobsets", "workloads")

    def lists() -> dict[str, int]:
        return {k: k8s_cluster.count_requests("list", k, USER_AGENT) for k in kinds}

    for watched in (jobs[:1], jobs):
        observer = KubernetesBackend(queued.resolve())  # its own client and counters
        ids = [j.job_id for j in watched]
        observer.poll(ids)  # discovery, once per client
        _until(
            "every job Queued",
            lambda: all(
                s.reason == "Queued"
                for s in observer.poll(ids).values()  # noqa: B023
            ),
        )
        time.sleep(2)  # the audit log is written in batches
        before, made = lists(), observer.client.stats.snapshot().requests
        observer.poll(ids)
        assert observer.client.stats.snapshot().requests - made == 4
        time.sleep(2)
        after = lists()
        assert {k: after[k] - before[k] for k in kinds} == dict.fromkeys(kinds, 1)
    for job in jobs:
        job.cancel()


def test_a_finished_slice_goes_with_its_ttl_as_a_single_host_job_does(tpu: kc.Target) -> None:
    """A finished multi-host job's JobSet carries the single-host Job's
    ``ttlSecondsAfterFinished`` (issue 34, item 9): JobSet deletes it that long after it
    finished, and its Jobs, pods, Service and Secret go with it (before: no TTL, so all of
    it stayed until ``cleanup()``; on GKE, for ever)."""
    target = tpu.merge({"signing_key": "a-key-for-the-ttl", "ttl_after_finished": 3})
    job = kc.submit(k8s_fns.square, (4,), target=target)
    backend = _backend(target)
    assert "jobsets" in _objects(backend, job.job_id)
    assert job.wait(timeout=180).status is kc.JobStatus.SUCCEEDED
    _until("the finished slice's objects to go", lambda: not _objects(backend, job.job_id) or None)
    assert job.state().status is kc.JobStatus.SUCCEEDED  # the record of truth is storage
