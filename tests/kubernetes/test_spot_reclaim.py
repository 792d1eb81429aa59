"""A real spot reclaim, as GKE does it (issue 20, item 3): the node's pods shut down
gracefully, the Node object is deleted and its pods are garbage-collected with it, so the
Job reads failed and its pod may be gone before anyone resolved the job's status. Every
variant reads ``Preempted`` and recovers from the checkpoint in KINETIC_OUTPUT_DIR as
exactly one next attempt. Before the fix each read ``Error`` and nothing recovered."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

import kinetic_core as kc

sys.path.insert(0, str(Path(__file__).resolve().parent))
import k8s_fns
from test_backend import _backend, _list, _pods
from test_reliability import _until

from kinetic_core.control.polling import poll_ticks

ROOT = Path(__file__).resolve().parents[2]
SPOT_NODE = "node-spot"  # where a spot target's pods run on the test cluster
GRACE = 5  # seconds of graceful shutdown (GKE gives 15): enough to save a checkpoint


@pytest.fixture
def spot(kube: kc.Target, k8s_cluster: Any) -> Iterator[kc.Target]:
    """A spot target (3 recoveries by default); the node comes back after the test, as
    GKE's autoscaler replaces a reclaimed VM, so later tests find every node."""
    try:
        yield kube.merge({"spot": True})
    finally:
        k8s_cluster.restore_node(SPOT_NODE)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _submit_until_halfway(target: kc.Target, work: Path) -> kc.JobHandle:
    work.mkdir()
    job = kc.submit(
        k8s_fns.resumable_in_outputs,
        (str(work),),
        target=target,
        idempotency_key=f"train-{uuid.uuid4()}",
    )
    for _ in poll_ticks(interval=0.3, timeout=120, describe=lambda: "the job to reach half-way"):
        if (work / "halfway").exists():
            return job
    raise AssertionError("unreachable")


def _watch_pod(api: client.ApiClient, job_id: str) -> tuple[threading.Thread, list[Any]]:
    """Every version of the job's pod the API server holds until it is deleted: a watch
    misses none (a status poll may)."""
    seen: list[Any] = []
    started = threading.Event()

    def follow() -> None:
        stream = watch.Watch()
        for event in stream.stream(
            client.CoreV1Api(api).list_namespaced_pod,
            "default",
            label_selector=f"kinetic/job-id={job_id}",
            timeout_seconds=180,
        ):
            started.set()
            seen.append(event["object"].status)
            if event["type"] == "DELETED":
                stream.stop()

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    assert started.wait(30), "the pod watch did not start"
    return thread, seen


def _reclaim(
    cluster: Any,
    api: client.ApiClient,
    target: kc.Target,
    job: kc.JobHandle,
    disruption_target: bool,
    by: str = "TerminationByKubelet",
) -> None:
    """Delete the job's node as GKE does, then bring a node back under its name. What is
    left for an observer: a Job whose status says failed, and none of its pods. The pod
    was failed first, carrying the DisruptionTarget condition (reason ``by``: the
    kubelet's graceful shutdown, or the pod GC) only when asked."""
    backend = _backend(target)
    (pod,) = _pods(backend, job.job_id)
    assert pod["spec"]["nodeName"] == SPOT_NODE
    watcher, seen = _watch_pod(api, job.job_id)
    cluster.delete_node(SPOT_NODE, grace=GRACE, disruption_target=disruption_target)
    watcher.join(timeout=60)
    last = seen[-1]
    targets = [(c.type, c.reason) for c in last.conditions or [] if c.type == "DisruptionTarget"]
    assert last.phase == "Failed"
    assert targets == ([("DisruptionTarget", by)] if disruption_target else [])
    assert _pods(backend, job.job_id) == []
    (k8s_job,) = _list(backend, "jobs", job.job_id)
    conditions = {c["type"]: c["status"] for c in k8s_job["status"].get("conditions", [])}
    assert conditions.get("Failed") == "True", k8s_job["status"]
    cluster.restore_node(SPOT_NODE)  # the autoscaler's replacement VM


def _assert_recovered_once(job: kc.JobHandle, work: Path) -> None:
    """Attempt 1 ended Preempted; attempt 2 resumed from its checkpoint and ran to the
    end; the function ran exactly twice in all."""
    value = job.result(timeout=240, cleanup=False)
    state = job.state()
    successor = state.job_id
    assert value == {"resumed_from": 5, "job_id": successor}
    assert (state.status, state.recoveries, state.attempt) == (kc.JobStatus.SUCCEEDED, 1, 2)
    assert _lines(work / "starts") == [f"{job.job_id} 0", f"{successor} 5"]
    ends = [(t.attempt, t.status.value, t.reason) for t in job.history() if t.status.terminal]
    assert ends == [(1, "FAILED", "Preempted"), (2, "SUCCEEDED", None)]


@pytest.mark.parametrize("disruption_target", [True, False], ids=["condition", "no-condition"])
@pytest.mark.parametrize("seen", [False, True], ids=["gc-before-any-poll", "seen-running"])
def test_a_reclaimed_spot_node_reads_preempted_and_recovers_once(
    spot: kc.Target,
    k8s_cluster: Any,
    k8s_api_client: client.ApiClient,
    tmp_path: Path,
    disruption_target: bool,
    seen: bool,
) -> None:
    """The node deleted and its pods GC'd, with and without the pods' DisruptionTarget
    condition (GKE 1.26+ / older), before any status poll or after one saw it running."""
    work = tmp_path / "work"
    job = _submit_until_halfway(spot, work)
    if seen:
        assert job.state().status is kc.JobStatus.RUNNING
    _reclaim(k8s_cluster, k8s_api_client, spot, job, disruption_target)
    _assert_recovered_once(job, work)


def test_a_node_not_ready_then_removed_by_the_autoscaler_reads_preempted(
    spot: kc.Target, k8s_cluster: Any, k8s_api_client: client.ApiClient, tmp_path: Path
) -> None:
    """The node stops reporting (its processes die unreported), the job reads RUNNING
    (NodeUnreachable); then the autoscaler deletes the Node and the pod GC its pods."""
    work = tmp_path / "work"
    job = _submit_until_halfway(spot, work)
    k8s_cluster.agent_control("lose-node", node=SPOT_NODE)
    state = _until(
        "the job to read NodeUnreachable",
        lambda: (s := job.state()).reason == "NodeUnreachable" and s,
    )
    assert state.status is kc.JobStatus.RUNNING
    _reclaim(k8s_cluster, k8s_api_client, spot, job, True, by="DeletionByPodGC")
    _assert_recovered_once(job, work)


def _observers(job_id: str, n: int) -> list[subprocess.Popen[str]]:
    """``n`` processes that each attach to the job and wait for its end."""
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(ROOT)!r})
        import kinetic_core as kc
        state = kc.attach({job_id!r}).wait(timeout=240)
        print(json.dumps(state.to_dict()))
        """
    )
    return [
        subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=ROOT
        )
        for _ in range(n)
    ]


def test_several_observers_of_a_reclaimed_job_start_one_successor(
    spot: kc.Target, k8s_cluster: Any, k8s_api_client: client.ApiClient, tmp_path: Path
) -> None:
    """Four processes resolve the job's status at once after the reclaim: one attempt 2."""
    work = tmp_path / "work"
    job = _submit_until_halfway(spot, work)
    _reclaim(k8s_cluster, k8s_api_client, spot, job, disruption_target=False)
    procs = _observers(job.job_id, 4)
    states = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    successor = job.state().job_id
    assert {(s["status"], s["job_id"], s["attempt"]) for s in states} == {
        ("SUCCEEDED", successor, 2)
    }
    _assert_recovered_once(job, work)
    store = Path(os.environ["KINETIC_STORAGE"][len("file://") :])
    assert sorted(os.listdir(store / "jobs")) == sorted([job.job_id, successor])


def test_a_failure_the_runner_recorded_stays_a_failure_when_its_node_goes(
    spot: kc.Target, k8s_cluster: Any
) -> None:
    """The function failed (the runner stored its error), then its node was reclaimed and
    the pod GC'd: the stored outcome decides, ``Error`` with the exit code, no recovery."""
    job = kc.submit(k8s_fns.exit_with, (3,), target=spot)
    backend = _backend(spot)
    _until(
        "the job's pod to fail",
        lambda: [p for p in _pods(backend, job.job_id) if p["status"].get("phase") == "Failed"],
    )
    k8s_cluster.delete_node(SPOT_NODE, grace=GRACE)
    assert _pods(backend, job.job_id) == []
    state = job.wait(timeout=60)
    assert (state.status, state.reason, state.exit_code) == (kc.JobStatus.FAILED, "Error", 3)
    assert (state.attempt, state.recoveries) == (1, 0)


def test_what_a_failed_job_without_pods_reads() -> None:
    """Without a cluster: the Job says failed and no pod of it is left."""
    from kinetic_core.backends.kubernetes.states import job_state

    def job(reason: str, deleting: bool = False) -> dict[str, Any]:
        cond = {"type": "Failed", "status": "True", "reason": reason, "message": "m"}
        meta = {"deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {}
        return {"metadata": meta, "status": {"conditions": [cond]}}

    gone = job_state(job("BackoffLimitExceeded"), [])
    assert (gone.phase, gone.reason) == ("exited", "Preempted")
    assert "BackoffLimitExceeded" in (gone.message or "") and "node" in (gone.message or "")
    assert job_state(job("BackoffLimitExceeded", deleting=True), []).phase == "not_found"
    assert job_state(job("DeadlineExceeded"), []).reason == "DeadlineExceeded"
    failed_pod = {
        "metadata": {},
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"state": {"terminated": {"exitCode": 1, "reason": "Error"}}}],
        },
    }
    assert job_state(job("BackoffLimitExceeded"), [failed_pod]).reason == "Error"
