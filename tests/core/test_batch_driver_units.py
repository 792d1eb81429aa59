"""The batch driver's pure parts: pod credentials, what a ledger ticket's handle says, and
which failed attempt never ran."""

from __future__ import annotations

from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.backends import BackendState
from kinetic_core.batch.driver import Driver, never_ran, pod_credentials
from kinetic_core.batch.manifest import BatchRecords, Ticket, child_job_id
from kinetic_core.records import layout
from kinetic_core.records.lifecycle import write_record
from kinetic_core.states import JobState, JobStatus
from kinetic_core.storage import open_storage
from tests.core import jobfns
from tests.core.scripted_backend import register


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


def test_the_ran_flag_decides_over_the_message() -> None:
    """The flag, where known, decides; only a state without it (an older version's) is
    read from its words."""

    def lost(message: str, ran: bool | None) -> JobState:
        return JobState(
            job_id="k1-1", status=JobStatus.FAILED, reason="Lost", message=message, ran=ran
        )

    assert never_ran(lost("the Kubernetes Job does not exist", ran=False))
    assert not never_ran(lost("the backend has no record of the job", ran=True))
    assert not never_ran(lost("the function never ran", ran=True))
    assert not never_ran(
        JobState(job_id="k1-1", status=JobStatus.FAILED, reason="Error", ran=False)
    )  # only a lost (or aborted) launch is not one of a child's tries


def test_a_deleted_child_that_never_started_is_relaunched_whatever_its_message_says(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A launched child whose backend lost it before its runner recorded a start reads
    ``ran`` False, and the driver relaunches it beyond its retries, though the message
    (a backend's own words) says neither "never ran" nor "has no record of the job"; one
    whose runner recorded its start was a try."""
    scripted = register(monkeypatch)
    gone = "the Kubernetes Job does not exist (deleted, or expired by its TTL)"
    states = []
    for started in (False, True):
        job = kc.submit(jobfns.add, (1, 2), target={"backend": "scripted"})
        if started:
            write_record(open_storage(storage_uri), job.job_id, layout.STARTED, event="started")
        scripted.phases[job.job_id] = BackendState("not_found", message=gone)
        states.append(job.state())
    never, tried = states
    assert (
        (never.status, never.reason)
        == (tried.status, tried.reason)
        == (
            kc.JobStatus.FAILED,
            "Lost",
        )
    )
    assert "never ran" not in (never.message or "") and "no record" not in (never.message or "")

    driver = Driver(
        BatchRecords(
            {
                "group_id": "grp-ran-1",
                "total_expected": 1,
                "storage": storage_uri,
                "target": {"backend": "scripted"},
                "retries": 0,
                "max_concurrency": 1,
            },
            None,
        )
    )
    assert not driver.is_final(0, never, cancelled=False)  # relaunched: it never ran
    assert driver.is_final(0, tried, cancelled=False)  # its one try, with retries=0
    assert (never.ran, tried.ran) == (False, True)
    # Read again (from the sealed outcome), the flag holds.
    assert kc.attach(never.job_id).state().ran is False
