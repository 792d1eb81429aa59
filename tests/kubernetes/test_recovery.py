"""Preemption and recovery on the real API server: the node agent reclaims a spot node
(graceful node shutdown as GKE does it) or evicts a pod; the job recovers from its
checkpoint as attempt 2 of its key, once, and the handle follows it."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

import kinetic_core as kc
from kinetic_core.backends.kubernetes import KubernetesBackend

sys.path.insert(0, str(Path(__file__).resolve().parent))
import k8s_fns
from test_backend import _backend, _list, _pods

from kinetic_core.control.polling import poll_ticks


def _disrupt(backend: KubernetesBackend, job_id: str, kind: str) -> None:
    """Ask the node agent to reclaim the pod's node or evict it (through the API)."""
    (pod,) = _pods(backend, job_id)
    params = backend.client.api.param_serialize(
        method="PATCH",
        resource_path=backend.client.ns("pods", pod["metadata"]["name"]),
        header_params={
            "Content-Type": "application/merge-patch+json",
            "Accept": "application/json",
        },
        body={"metadata": {"annotations": {"kinetic.test/disrupt": kind}}},
        auth_settings=["BearerToken"],
    )
    response = backend.client.api.call_api(*params)
    assert response.status < 300, response.read()


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.parametrize("kind", ["reclaim", "evict"])
def test_disrupted_spot_job_recovers_from_its_checkpoint(
    kube: kc.Target, tmp_path: Path, kind: str
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    target = kube.merge({"spot": True})  # spot: 3 recoveries by default
    job = kc.submit(
        k8s_fns.checkpointed, (str(work),), target=target, idempotency_key=f"train-{uuid.uuid4()}"
    )
    for _ in poll_ticks(interval=0.3, timeout=120, describe=lambda: "the job to reach half-way"):
        if (work / "halfway").exists():
            break
    _disrupt(_backend(target), job.job_id, kind)

    value = job.result(timeout=240, cleanup=False)
    state = job.state()
    successor = state.job_id
    assert value == {"resumed_from": 5, "job_id": successor}
    assert (state.status, state.recoveries, state.attempt) == (kc.JobStatus.SUCCEEDED, 1, 2)
    assert _lines(work / "starts") == [f"{job.job_id} 0", f"{successor} 5"]
    assert _lines(work / "completions") == [successor]  # one attempt ran to completion
    if kind == "reclaim":  # SIGTERM first: the callback saved a checkpoint in its grace period
        assert (work / "notice").read_text() == f"{job.job_id} saved on SIGTERM, preempted=True"
    # One Kubernetes Job for the running attempt, no duplicate; the recovery deleted the
    # disrupted attempt's Job (a partitioned node's process must not live on).
    backend = _backend(target)
    assert len(_list(backend, "jobs", successor)) == 1
    for _ in poll_ticks(interval=0.3, timeout=60, describe=lambda: "attempt 1's Job to go"):
        if not _list(backend, "jobs", job.job_id):
            break
    ends = [(t.attempt, t.status.value, t.reason) for t in job.history() if t.status.terminal]
    assert ends == [(1, "FAILED", "Preempted"), (2, "SUCCEEDED", None)]


def test_exhausted_recoveries_fail_with_reason_and_attempt_history(
    kube: kc.Target, tmp_path: Path
) -> None:
    target = kube.merge({"max_recoveries": 1, "recover_on_exit_codes": [75]})
    job = kc.submit(k8s_fns.exit_with, (75,), target=target)
    state = job.wait(timeout=240)
    assert (state.status, state.exit_code, state.recoveries) == (kc.JobStatus.FAILED, 75, 1)
    ends = [(t.attempt, t.status.value, t.exit_code) for t in job.history() if t.status.terminal]
    assert ends == [(1, "FAILED", 75), (2, "FAILED", 75)]
    assert len(_list(_backend(target), "jobs", state.job_id)) == 1


def test_disruptions_read_as_preempted_and_nothing_else_does() -> None:
    """Pod status as servers without the DisruptionTarget condition (1.20) and with it
    report disruptions; the user's error, OOMKilled and the rest stay what they are."""
    from kinetic_core.backends.kubernetes.states import job_state

    failed = {"status": {"conditions": [{"type": "Failed", "status": "True"}]}}

    def pod(status: dict[str, Any], terminated: dict[str, Any] | None = None) -> dict[str, Any]:
        state = {"terminated": terminated or {"exitCode": 143, "reason": "Error"}}
        return {
            "metadata": {},
            "status": {"phase": "Failed", **status, "containerStatuses": [{"state": state}]},
        }

    for reason in ("Terminated", "Shutdown", "NodeShutdown", "NodeLost", "Evicted"):
        assert job_state(failed, [pod({"reason": reason})]).reason == "Preempted", reason
    target = {"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet"}
    assert job_state(failed, [pod({"conditions": [target]})]).reason == "Preempted"
    assert job_state(failed, [pod({})]).reason == "Error"
    oom = pod({}, {"exitCode": 137, "reason": "OOMKilled"})
    assert job_state(failed, [oom]).reason == "OOMKilled"
    deadline = {
        "status": {
            "conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]
        }
    }
    assert job_state(deadline, []).reason == "DeadlineExceeded"
