"""The batch driver's pure parts: pod credentials and what a ledger ticket's handle says."""

from __future__ import annotations

from pathlib import Path

from kinetic_core.batch.driver import never_ran, pod_credentials
from kinetic_core.batch.manifest import BatchRecords, Ticket, child_job_id
from kinetic_core.states import JobState, JobStatus


def test_a_driver_in_a_pod_uses_the_pods_credentials_but_records_the_public_target(
    tmp_path: Path,
) -> None:
    target = {
        "backend": "kubernetes",
        "kubeconfig": "/home/me/.kube/config",
        "namespace": "ml",
        "image": "r.io/me/runner:1",
    }
    assert pod_credentials(target, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) == {"in_cluster": True}
    assert pod_credentials(target, {}) == {}
    assert pod_credentials({"backend": "local"}, {"KUBERNETES_SERVICE_HOST": "x"}) == {}

    manifest = {
        "group_id": "grp-test-1",
        "total_expected": 2,
        "storage": f"file://{tmp_path}",
        "target": target,
        "name": "fit",
        "tags": {"team": "ml"},
    }
    records = BatchRecords(manifest, None)
    records.backend_overlay = pod_credentials(target, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"})
    ticket = Ticket(seq=0, index=1, attempt=2, at=123.0)
    used = records.handle_for(ticket)
    public = records.public_handle(ticket)
    assert used.job_id == public.job_id == child_job_id("grp-test-1", 1, 2)
    assert used.target == {
        "backend": "kubernetes",
        "namespace": "ml",
        "image": "r.io/me/runner:1",
        "in_cluster": True,
    }
    assert public.target == target  # what handle.json says: observers elsewhere use it
    assert public.created_at == 123.0 and public.attempt == 2
    assert public.tags == {"team": "ml", "kinetic/group-id": "grp-test-1", "kinetic/index": "1"}


def test_an_attempt_whose_launcher_died_never_ran() -> None:
    def failed(reason: str, message: str = "") -> JobState:
        return JobState(job_id="k1-1", status=JobStatus.FAILED, reason=reason, message=message)

    assert never_ran(failed("Aborted"))
    assert never_ran(
        failed("Lost", "its submitter (pid 7) died before launching it; the function never ran")
    )
    assert not never_ran(failed("Lost", "supervisor process 7 vanished without recording an exit"))
    assert never_ran(
        failed("Lost", "the backend has no record of the job and no result was stored")
    )
    assert not never_ran(failed("Error"))
