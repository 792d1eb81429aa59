"""A job id means one run, and a job told "failed" never succeeds later: faults that GKE
really produces, on the real API server (issue 25). Each test failed before its fix."""

from __future__ import annotations

import copy
import math
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from tenacity import stop_after_attempt, wait_none

import kinetic_core as kc
from kinetic_core.backends import LaunchSpec
from kinetic_core.backends.kubernetes import KubernetesBackend, job_name
from kinetic_core.backends.kubernetes import client as kube_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
import k8s_fns
from test_backend import _backend, _list, _patch_status_seen, _pods
from test_recovery import _disrupt
from test_reliability import NOWHERE, RUNNING_POD, _pod_of, _until


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@contextmanager
def _outage_at_first_launch(
    k8s_cluster: Any, monkeypatch: pytest.MonkeyPatch, seconds: float, skip: str
) -> Iterator[threading.Thread]:
    """The control plane goes down (really: killed, as in a GKE upgrade) the moment the
    backend is first asked to launch a job other than ``skip``, and comes back after
    ``seconds``."""
    launch = KubernetesBackend.launch
    down = threading.Event()
    outage = threading.Thread(target=lambda: None)

    def run_outage() -> None:
        with k8s_cluster.control_plane_outage():
            down.set()
            time.sleep(seconds)

    def launch_into_outage(self: KubernetesBackend, spec: LaunchSpec) -> None:
        nonlocal outage
        if spec.job_id != skip and not down.is_set():
            outage = threading.Thread(target=run_outage)
            outage.start()
            down.wait(timeout=60)
        launch(self, spec)

    monkeypatch.setattr(KubernetesBackend, "launch", launch_into_outage)
    try:
        yield outage
    finally:
        if outage.is_alive():
            outage.join(timeout=240)


def test_an_outage_while_a_recovery_launches_never_reads_failed(
    kube: kc.Target, tmp_path: Path, k8s_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attempt 1 is preempted; the control plane is down from the successor's Job create
    on, longer than the client's retries. ``result()`` waits the outage out and returns
    attempt 2's value: it never says FAILED for a job that is about to succeed."""
    monkeypatch.setattr(
        kube_client,
        "API_RETRY",
        kube_client.API_RETRY.copy(stop=stop_after_attempt(2), wait=wait_none()),
    )
    work = tmp_path / "work"
    work.mkdir()
    job = kc.submit(
        k8s_fns.checkpointed,
        (str(work),),
        target=kube.merge({"spot": True}),
        idempotency_key=f"train-{uuid.uuid4()}",
    )
    _until("the job to reach half-way", lambda: (work / "halfway").exists(), timeout=120)
    with _outage_at_first_launch(k8s_cluster, monkeypatch, 20, skip=job.job_id) as outage:
        _disrupt(_backend(kube), job.job_id, "reclaim")
        value = job.result(timeout=300, cleanup=False)
    assert not outage.is_alive()
    state = job.state()
    assert (state.status, state.attempt, state.recoveries) == (kc.JobStatus.SUCCEEDED, 2, 1)
    assert value == {"resumed_from": 5, "job_id": state.job_id}
    assert _lines(work / "completions") == [state.job_id]  # one attempt ran to the end


def test_a_job_deleted_with_orphan_propagation_runs_once(kube: kc.Target, tmp_path: Path) -> None:
    """``kubectl delete job --cascade=orphan``: the pod keeps running the function. The
    job is not Lost while it runs, no second attempt starts beside it, and its result is
    the one run's."""
    backend = _backend(kube)
    runs = tmp_path / "runs.txt"
    job = kc.submit(k8s_fns.record_run, (str(runs), 8), target=kube.merge({"max_recoveries": 2}))
    _until("the first run", lambda: _lines(runs))
    backend.client.call(
        "DELETE",
        backend.client.ns("jobs", job_name(job.job_id)),
        body={"propagationPolicy": "Orphan"},
    )
    _until("the Job to go", lambda: not _list(backend, "jobs", job.job_id))
    state = job.state()
    assert (state.status, state.reason) == (kc.JobStatus.RUNNING, "JobDeleted"), state
    assert job.result(timeout=120, cleanup=False) == 1  # one line: the function ran once
    state = job.state()
    assert (state.status, state.attempt, state.recoveries) == (kc.JobStatus.SUCCEEDED, 1, 0)
    assert len(_lines(runs)) == 1
    job.cleanup()


def test_a_gracefully_deleted_pod_stops_before_the_next_attempt_starts(
    kube: kc.Target, tmp_path: Path
) -> None:
    """A pod of a job with ``max_recoveries`` deleted with its grace period: its process
    saves for 5 s after SIGTERM. The next attempt starts only after that (Kubernetes'
    replacement pod refuses to run the function a second time meanwhile)."""
    backend = _backend(kube)
    journal = tmp_path / "journal"
    job = kc.submit(k8s_fns.journaled, (str(journal), 5), target=kube.merge({"max_recoveries": 1}))
    _until("the first run", lambda: _lines(journal))
    (pod,) = _pods(backend, job.job_id)
    backend.client.call("DELETE", backend.client.ns("pods", pod["metadata"]["name"]))
    successor = job.result(timeout=240, cleanup=False)
    assert successor != job.job_id
    assert _lines(journal) == [
        f"{job.job_id} start",
        f"{job.job_id} saved",
        f"{successor} start",
        f"{successor} done",
    ]
    ends = [(t.attempt, t.status.value, t.reason) for t in job.history() if t.status.terminal]
    assert ends == [(1, "FAILED", "Lost"), (2, "SUCCEEDED", None)]


def test_cleanup_from_any_attempt_cleans_every_attempt(kube: kc.Target) -> None:
    """Cleaning the first attempt's handle after a recovery leaves no Job, Secret or pod
    of any attempt (it followed ``recovered_from`` backwards only)."""
    target = kube.merge(
        {"max_recoveries": 1, "recover_on_exit_codes": [75], "signing_key": "k-" + uuid.uuid4().hex}
    )
    job = kc.submit(k8s_fns.exit_with, (75,), target=target)
    state = job.wait(timeout=240)
    assert (state.status, state.attempt) == (kc.JobStatus.FAILED, 2)
    backend = _backend(target)
    attempts = [job.job_id, state.job_id]
    assert _list(backend, "jobs", state.job_id) and _list(backend, "secrets", state.job_id)
    job.cleanup()

    def left() -> list[str]:
        return [
            f"{kind} of {a}"
            for a in attempts
            for kind in ("jobs", "secrets", "pods")
            if _list(backend, kind, a)
        ]

    _until("every attempt's Job, Secret and pods to go", lambda: not left(), timeout=60)


def test_history_is_monotone_whatever_the_clocks_say(kube: kc.Target) -> None:
    """PENDING is dated by the observer's clock, RUNNING by the pod's ``startedAt`` in
    whole seconds: a pod started within the second after PENDING was seen still reads
    PENDING first, then RUNNING, with no negative duration."""
    backend = _backend(kube)
    job = kc.submit(k8s_fns.square, (3,), target=kube.merge(NOWHERE))
    pod = _pod_of(backend, job.job_id)
    assert job.state().status is kc.JobStatus.PENDING
    (pending,) = job.history()
    assert pending.at is not None
    started = math.floor(pending.at.timestamp())  # the same second, truncated
    running = copy.deepcopy(RUNNING_POD)
    running["containerStatuses"][0]["state"]["running"]["startedAt"] = time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)
    )
    _patch_status_seen(backend, pod["metadata"]["name"], running)
    assert job.state().status is kc.JobStatus.RUNNING
    history = job.history()
    assert [t.status for t in history] == [kc.JobStatus.PENDING, kc.JobStatus.RUNNING]
    assert all(t.duration is None or t.duration >= 0 for t in history)
    assert history[0].at is not None and history[1].at is not None
    assert history[0].at <= history[1].at
    job.cancel(wait=0)


KILLED_AT_LAUNCH = """
import os, signal, sys
sys.path.insert(0, {tests!r})
import kinetic_core as kc
import k8s_fns
from kinetic_core.backends.kubernetes import KubernetesBackend

def die(self, spec):  # the submitter's worker is killed the moment it would create the Job
    os.kill(os.getpid(), signal.SIGKILL)

KubernetesBackend.launch = die
kc.submit(k8s_fns.square, (5,), target=kc.Target.from_json({target!r}), idempotency_key={key!r})
"""


def test_a_resubmit_launches_the_job_its_killed_submitter_left_unlaunched(
    kube: kc.Target, tmp_path: Path
) -> None:
    """An Airflow worker killed between the job's ``handle.json`` and its Job create: the
    retry's resubmit with the same key reattaches to that job and launches it (before: it
    attached to a job nothing would ever launch, PENDING until read Lost)."""
    key = f"nightly-{uuid.uuid4()}"
    script = KILLED_AT_LAUNCH.format(
        tests=str(Path(__file__).resolve().parent), target=kube.to_json(), key=key
    )
    killed = subprocess.run([sys.executable, "-c", script], timeout=120, check=False)
    assert killed.returncode == -9
    job = kc.submit(k8s_fns.square, (5,), target=kube, idempotency_key=key)
    assert job.reattached and job.attempt == 1
    assert job.result(timeout=60)["square"] == 25


def test_a_job_being_deleted_with_no_pod_left_is_not_pending() -> None:
    """After a foreground delete the Job object outlives its pods for a moment: it is not
    a Job waiting for its controller to make a pod (a cancelled job must read stopped)."""
    from kinetic_core.backends.kubernetes.states import job_state

    deleting = {"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}, "status": {}}
    assert job_state(deleting, []).phase == "not_found"
    assert job_state({"metadata": {}, "status": {}}, []).phase == "pending"


def test_a_pod_that_ended_while_being_deleted_reads_as_gone() -> None:
    """A pod deleted gracefully ends (exit 143 after its save) a moment before its final
    delete: read then, with its Job already failed (its replacement refused to run the
    function again), the job reads as once the pod is gone (Lost), not Error."""
    from kinetic_core.backends.kubernetes.states import job_state

    def pod(name: str, code: int, deleting: bool) -> dict[str, Any]:
        terminated = {"terminated": {"exitCode": code, "reason": "Error"}}
        meta: dict[str, Any] = {"name": name, "creationTimestamp": f"2026-01-01T00:00:0{code % 7}Z"}
        if deleting:
            meta["deletionTimestamp"] = "2026-01-01T00:00:09Z"
        status = {"name": "runner", "state": terminated}
        return {"metadata": meta, "status": {"phase": "Failed", "containerStatuses": [status]}}

    failed = {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}
    job = {"metadata": {"name": "j"}, "status": {"conditions": [failed]}}
    stopped, replacement = pod("first", 143, True), pod("second", 117, False)
    assert job_state(job, [stopped, replacement]) == job_state(job, [replacement])
    assert job_state(job, [stopped, replacement]).phase == "gone"
    assert job_state(job, [stopped]) == job_state(job, [])
    assert job_state(job, [pod("first", 143, False)]).reason == "Error"  # not being deleted
