"""A decision is carried out (issue 34): a decided cancel stops the job whoever observes it
next, a terminal state is never read while a recovery is still possible, and a keyed
resubmit never runs beside the attempt before it. On the real test cluster; each test
failed before its fix."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from tenacity import stop_after_attempt, wait_none

import kinetic_core as kc
from kinetic_core.backends.kubernetes import KubernetesBackend, job_name
from kinetic_core.backends.kubernetes import client as kube_client
from kinetic_core.config.kubeconfig import kubeconfig_reference
from kinetic_core.runtime import signals, telemetry

sys.path.insert(0, str(Path(__file__).resolve().parent))
import k8s_fns
from test_backend import _backend
from test_recovery import _disrupt
from test_reliability import _until
from test_submit_faults import _without

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _live_pods(backend: KubernetesBackend, job_id: str) -> list[str]:
    """The job's pods that may still run its process (not finished)."""
    pods = backend.client.call(
        "GET", backend.client.ns("pods"), query={"labelSelector": f"kinetic/job-id={job_id}"}
    )["items"]
    return [
        p["metadata"]["name"]
        for p in pods
        if p["status"].get("phase") not in ("Succeeded", "Failed")
    ]


@pytest.mark.timeout(420)
def test_a_cancel_whose_delete_fails_after_its_dry_run_is_carried_out_before_a_resubmit(
    kube: kc.Target, tmp_path: Path, k8s_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control plane goes down between ``cancel()``'s dry-run deletes and the real
    ones: ``cancel()`` raises, CANCELLED is recorded. Once the API is back, the keyed
    resubmit an orchestrator's retry makes starts attempt 2 only after attempt 1's
    process is gone (before: attempt 2 ran beside attempt 1, which ran on for ever)."""
    monkeypatch.setattr(
        kube_client,
        "API_RETRY",
        kube_client.API_RETRY.copy(stop=stop_after_attempt(2), wait=wait_none()),
    )
    journal = tmp_path / "journal"
    key = f"nightly-{uuid.uuid4()}"
    job = kc.submit(k8s_fns.journaled, (str(journal), 2), target=kube, idempotency_key=key)
    _until("attempt 1 to start", lambda: _lines(journal))
    real_cancel = KubernetesBackend.cancel

    def cancel_into_an_outage(self: KubernetesBackend, job_id: str) -> None:
        with k8s_cluster.control_plane_outage():
            real_cancel(self, job_id)

    monkeypatch.setattr(KubernetesBackend, "cancel", cancel_into_an_outage)
    with pytest.raises(kc.BackendError):
        job.cancel(wait=0)
    monkeypatch.setattr(KubernetesBackend, "cancel", real_cancel)
    assert job.state().status is kc.JobStatus.CANCELLED  # decided, final at once

    again = kc.submit(k8s_fns.journaled, (str(journal), 2), target=kube, idempotency_key=key)
    assert (again.attempt, again.reattached) == (2, False)
    assert again.result(timeout=180) == again.job_id
    assert _lines(journal) == [
        f"{job.job_id} start",
        f"{job.job_id} saved",  # attempt 1 stopped (its SIGTERM save) before attempt 2 began
        f"{again.job_id} start",
        f"{again.job_id} done",
    ]
    assert not _live_pods(_backend(kube), job.job_id)


KILLED_CANCELLER = r"""
import os, signal, sys
import kinetic_core as kc
from kinetic_core.backends.kubernetes import KubernetesBackend, job_name

def die(self, job_id):  # an Airflow worker killed in on_kill, after the record
    os.kill(os.getpid(), signal.SIGKILL)

KubernetesBackend.cancel = die
kc.attach(sys.argv[1]).cancel()
"""


def _cancel_and_die(job: kc.JobHandle) -> None:
    done = subprocess.run(
        [sys.executable, "-c", KILLED_CANCELLER, job.job_id],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{HERE}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -9, done.stderr


@pytest.mark.timeout(300)
def test_a_canceller_killed_after_recording_cancelled_is_carried_out(
    kube: kc.Target, tmp_path: Path
) -> None:
    """The canceller dies between recording CANCELLED and the delete. Any observer that
    then reads the job stops it (past the in-flight moment its canceller had), and a
    repeated ``cancel()`` retries the delete at once and says True (before: every reader
    saw CANCELLED, ``cancel()`` returned False, and the pods ran on until a cleanup)."""
    backend = _backend(kube)
    runs = [tmp_path / "observed", tmp_path / "cancelled-again"]
    # runners that do not read storage within the test (a runner reads its recorded cancel
    # and stops itself: runtime/decided_stop.py); the observer and cancel() carry it out
    deaf = dataclasses.replace(kube, env={signals.POLL_ENV: "3600", telemetry.SAMPLE_ENV: "3600"})
    observed, cancelled = (
        kc.submit(k8s_fns.record_run, (str(path), 600), target=deaf) for path in runs
    )
    _until("both jobs to run", lambda: all(_lines(path) for path in runs))
    for job in (observed, cancelled):
        _cancel_and_die(job)
        assert job.state().status is kc.JobStatus.CANCELLED
    assert _live_pods(backend, observed.job_id) and _live_pods(backend, cancelled.job_id)

    assert cancelled.cancel(wait=60) is True  # carried out now
    assert not _live_pods(backend, cancelled.job_id)
    assert cancelled.cancel(wait=0) is False  # nothing left to stop

    def stopped_by_an_observer() -> bool:
        state = kc.attach(observed.job_id).state()
        assert state.status is kc.JobStatus.CANCELLED, state  # never anything else
        return not _live_pods(backend, observed.job_id)

    _until("an observer to stop the cancelled job", stopped_by_an_observer, timeout=120)
    assert len(_lines(runs[0])) == 1 and len(_lines(runs[1])) == 1


@pytest.mark.timeout(420)
def test_an_observer_that_cannot_recover_reads_recovering_never_failed(
    kube: kc.Target, tmp_path: Path, k8s_cluster: Any
) -> None:
    """A preempted job observed by a process whose service account cannot delete Jobs
    (it cannot stop attempt 1, so it may not start attempt 2): it reads PENDING
    ``Recovering`` naming the permission, never FAILED, until an observer with the rights
    recovers it and the job succeeds (before: FAILED/Preempted, then SUCCEEDED)."""
    work = tmp_path / "work"
    work.mkdir()
    job = kc.submit(
        k8s_fns.checkpointed,
        (str(work),),
        target=kube.merge({"max_recoveries": 1}),
        idempotency_key=f"train-{uuid.uuid4()}",
    )
    content = k8s_cluster.service_account_kubeconfig(
        f"observer-{os.urandom(3).hex()}", _without("delete", "jobs")
    )
    kc.Target(backend="kubernetes", kubeconfig=content)  # remembered in this process
    weak = dataclasses.replace(
        job, target={**job.target, "kubeconfig": kubeconfig_reference(content)}
    )
    _until("the job to reach half-way", lambda: (work / "halfway").exists(), timeout=120)
    _disrupt(_backend(kube), job.job_id, "reclaim")

    def blocked() -> kc.JobState | None:
        state = weak.state()
        assert not state.terminal, state
        return state if state.reason == "Recovering" and state.job_id == job.job_id else None

    seen = _until("the weak observer to read Recovering", blocked, timeout=120)
    assert seen.status is kc.JobStatus.PENDING
    assert "delete" in (seen.message or "") and "jobs" in (seen.message or ""), seen
    assert weak.state().status is kc.JobStatus.PENDING  # still: it stays until someone acts

    state = job.wait(timeout=240)  # an observer with the rights recovers it
    assert (state.status, state.attempt) == (kc.JobStatus.SUCCEEDED, 2), state
    assert weak.state().status is kc.JobStatus.SUCCEEDED
    ends = [(t.attempt, t.status.value) for t in job.history() if t.status.terminal]
    assert ends == [(1, "FAILED"), (2, "SUCCEEDED")]  # attempt 1's end, never the job's


# ---- a gang (multi-host JobSet) never runs twice at once --------------------------------------

SLICE = "tpu-v5e-16"
#: How long each worker of attempt 1 saves on SIGTERM: long enough that a successor
#: started beside the stopping workers shows in the journal (a reclaim allows 15 s).
SAVE_SECONDS = 10


def _worker_pod(backend: KubernetesBackend, job_id: str, index: int) -> str:
    pods = backend.client.call(
        "GET",
        backend.client.ns("pods"),
        query={"labelSelector": f"kinetic/job-id={job_id},jobset.sigs.k8s.io/job-index={index}"},
    )["items"]
    (pod,) = [p for p in pods if p["status"].get("phase") not in ("Succeeded", "Failed")]
    return str(pod["metadata"]["name"])


def _reclaim(backend: KubernetesBackend, pod: str) -> None:
    """The node agent reclaims the pod's node (SIGTERM, then SIGKILL; pod ``Terminated``)."""
    params = backend.client.api.param_serialize(
        method="PATCH",
        resource_path=backend.client.ns("pods", pod),
        header_params={
            "Content-Type": "application/merge-patch+json",
            "Accept": "application/json",
        },
        body={"metadata": {"annotations": {"kinetic.test/disrupt": "reclaim"}}},
        auth_settings=["BearerToken"],
    )
    response = backend.client.api.call_api(*params)
    assert response.status < 300, response.read()


def _gang_runs_once_at_a_time(
    kube: kc.Target, tmp_path: Path, disrupt: Any
) -> tuple[kc.JobHandle, list[tuple[int, str, str | None]]]:
    """A 4-worker job with ``max_recoveries=1`` whose worker 1 is disrupted by ``disrupt``
    once every worker started; every line of attempt 1 (its workers' saves on SIGTERM
    included) comes before attempt 2's first start. Returns the job and its ends."""
    journal = tmp_path / "journal"
    target = kube.merge({"accelerator": SLICE, "max_recoveries": 1})
    job = kc.submit(
        k8s_fns.slice_journaled,
        (str(journal), SAVE_SECONDS),
        target=target,
        idempotency_key=f"g-{uuid.uuid4()}",
    )
    _until("every worker started", lambda: len(_lines(journal)) == 4, timeout=180)
    backend = _backend(target)
    disrupt(backend, _worker_pod(backend, job.job_id, 1))
    successor = job.result(timeout=300, cleanup=False)
    assert successor != job.job_id
    lines = _lines(journal)
    first = [i for i, line in enumerate(lines) if line.startswith(f"{job.job_id} ")]
    second = [i for i, line in enumerate(lines) if line.startswith(f"{successor} ")]
    assert max(first) < min(second), "attempt 2 started while attempt 1 still ran:\n" + "\n".join(
        lines
    )
    assert f"{successor} 0 start beside=[]" in lines  # its worker 0 ran, alone
    beside = [line for line in lines if " beside=" in line and not line.endswith("=[]")]
    assert not beside, "attempt 2 ran beside attempt 1:\n" + "\n".join(lines)
    ends = [(t.attempt, t.status.value, t.reason) for t in job.history() if t.status.terminal]
    return job, ends


@pytest.mark.timeout(480)
def test_a_reclaimed_worker_recovers_the_gang_only_after_every_worker_is_gone(
    kube: kc.Target, tmp_path: Path
) -> None:
    """Worker 1's node reclaimed (SIGTERM, pod ``Terminated``): the gang reads Preempted and
    attempt 2 starts only once workers 0, 2 and 3 of attempt 1 stopped too (before: a
    Failed JobSet read as ended while they still ran, and attempt 2 started beside them)."""
    _, ends = _gang_runs_once_at_a_time(kube, tmp_path, _reclaim)
    assert ends == [(1, "FAILED", "Preempted"), (2, "SUCCEEDED", None)]


@pytest.mark.timeout(480)
def test_a_gracefully_deleted_worker_pod_recovers_the_gang_as_a_unit(
    kube: kc.Target, tmp_path: Path
) -> None:
    """Worker 1's pod deleted with its grace period: its replacement pod refuses to run the
    function again (exit 117), which is never the job's failure; the gang reads Lost, is
    recovered as a unit, and attempt 2 starts after every worker of attempt 1 is gone
    (before: FAILED/Error "worker 1: ... backoff limit", not recovered)."""

    def delete(backend: KubernetesBackend, pod: str) -> None:
        backend.client.call("DELETE", backend.client.ns("pods", pod))

    _, ends = _gang_runs_once_at_a_time(kube, tmp_path, delete)
    assert ends == [(1, "FAILED", "Lost"), (2, "SUCCEEDED", None)]


# ---- the signing-key Secret is never unowned ---------------------------------------------------

KILLED_AFTER_CREATE = r"""
import json, os, signal, sys
import kinetic_core as kc
import k8s_fns
from kinetic_core.backends.kubernetes import client

original = client.KubeClient.call

def call(self, method, path, **kw):
    answer = original(self, method, path, **kw)
    made = method == "POST" and path.endswith("/" + sys.argv[3])
    if made and not (kw.get("query") or {}).get("dryRun"):
        os.kill(os.getpid(), signal.SIGKILL)  # right after the Job (JobSet) was created
    return answer

client.KubeClient.call = call
target = kc.Target.from_dict(json.loads(sys.argv[1]))
kc.submit(k8s_fns.square, (6,), target=target, idempotency_key=sys.argv[2])
"""
SECRET_KEY = "a-signing-key-for-issue-34"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("plural", ["jobs", "jobsets"])
def test_a_submitter_killed_after_the_create_leaves_no_secret_unowned(
    kube: kc.Target, plural: str
) -> None:
    """A submitter killed right after the Job (single-host) or JobSet (multi-host) create:
    the orchestrator's keyed resubmit launches the job again, which runs, and its
    signing-key Secret is owned by its Job, so it goes when the Job is deleted (before:
    the Secret was made first and its owner patched in after the create; killed in
    between, the Secret outlived its Job for ever)."""
    target = kube.merge({"accelerator": SLICE} if plural == "jobsets" else {})
    key = f"killed-{os.urandom(4).hex()}"
    done = subprocess.run(
        [sys.executable, "-c", KILLED_AFTER_CREATE, target.to_json(), key, plural],
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": f"{ROOT}{os.pathsep}{HERE}",
            "KINETIC_SIGNING_KEY": SECRET_KEY,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -9, done.stderr
    job = kc.submit(
        k8s_fns.square,
        (6,),
        target=dataclasses.replace(target, signing_key=SECRET_KEY),
        idempotency_key=key,
    )
    assert job.reattached
    assert job.result(timeout=180, cleanup=False)["square"] == 36
    backend = _backend(kube)
    name = job_name(job.job_id)
    secret = backend.client.call("GET", backend.client.ns("secrets", name))
    kinds = [o["kind"] for o in secret["metadata"].get("ownerReferences") or []]
    assert kinds == ["JobSet" if plural == "jobsets" else "Job"], secret["metadata"]
    backend.client.call(  # someone deletes it (or its TTL does)
        "DELETE", backend.client.ns(plural, name), body={"propagationPolicy": "Background"}
    )

    def secret_gone() -> bool:
        found = backend.client.call(
            "GET",
            backend.client.ns("secrets"),
            query={"labelSelector": f"kinetic/job-id={job.job_id}"},
        )["items"]
        return not found

    _until("the Secret to go with its owner", secret_gone, timeout=120)


def test_a_failed_jobset_with_a_live_worker_pod_is_not_ended() -> None:
    """What the gang cases rely on, without a cluster: a Failed JobSet (worker 1 first)
    reads running ``Terminating`` while worker 0's pod lives, and worker 1's refused
    replacement pod (exit 117) reads as gone (Lost), not that exit's Error."""
    from kinetic_core.backends.kubernetes.slice_states import jobset_state
    from kinetic_core.states import REFUSED_EXIT_CODE

    index = "jobset.sigs.k8s.io/job-index"

    def pod(i: int, phase: str, code: int | None = None) -> dict[str, Any]:
        state = {"terminated": {"exitCode": code}} if code is not None else {"running": {}}
        return {
            "metadata": {"name": f"p{i}-{phase}", "labels": {index: str(i)}},
            "status": {"phase": phase, "containerStatuses": [{"name": "runner", "state": state}]},
        }

    failed = {"type": "Failed", "status": "True", "message": "(first failed job: js-workers-1)"}
    jobset = {
        "metadata": {"labels": {}},
        "spec": {"replicatedJobs": [{"replicas": 2}]},
        "status": {"conditions": [failed]},
    }
    jobs = [
        {"metadata": {"labels": {index: "0"}}, "status": {}},
        {
            "metadata": {"labels": {index: "1"}},
            "status": {"conditions": [{"type": "Failed", "status": "True"}]},
        },
    ]
    refused = pod(1, "Failed", REFUSED_EXIT_CODE)
    stopping = jobset_state(jobset, jobs, [pod(0, "Running"), refused])
    assert (stopping.phase, stopping.reason) == ("running", "Terminating"), stopping
    assert "worker 0 still stopping" in (stopping.message or "")
    ended = jobset_state(jobset, jobs, [pod(0, "Failed", 143), refused])
    assert ended.phase == "gone" and "worker 1" in (ended.message or ""), ended
