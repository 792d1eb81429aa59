"""State history: every observed transition, recorded once in storage (create-only
records, so it works on object stores), readable afterwards from any process."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from gcs_emulator import GCSEmulator

import kinetic_core as kc
from kinetic_core.backends import BackendState
from kinetic_core.cli import main
from kinetic_core.records import history, layout
from kinetic_core.records.envelope import success_body
from kinetic_core.runtime import runner
from kinetic_core.storage import open_storage
from tests.core import jobfns
from tests.core.scripted_backend import register


def _entries(gcs: GCSEmulator, prefix: str, job_id: str) -> list[str]:
    folder = f"{prefix}/{layout.history_dir(job_id)}/"
    return [n[len(folder) :] for n in gcs.server.object_names() if n.startswith(folder)]


def test_a_job_that_sat_unschedulable_says_so_afterwards_on_gcs(
    gcs_emulator: GCSEmulator,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scripted = register(monkeypatch)
    prefix = f"h-{uuid.uuid4().hex[:12]}"
    target = {"backend": "scripted", "storage": gcs_emulator.uri(prefix)}
    monkeypatch.setenv("KINETIC_STORAGE", gcs_emulator.uri(prefix))
    job = kc.submit(jobfns.add, (1, 2), target=target)
    scripted.phases[job.job_id] = BackendState(
        "pending", reason="Unschedulable", message="0/3 nodes are available: Insufficient tpu"
    )
    for _ in range(5):
        assert job.state().reason == "Unschedulable"
    history._seen.clear()  # another process observes the same state: still one record
    assert job.state().reason == "Unschedulable"
    scripted.phases[job.job_id] = BackendState("running", started_at=time.time())
    for _ in range(3):
        assert job.state().status is kc.JobStatus.RUNNING
    runner._store(open_storage(job.storage), job.job_id, success_body(3), None)
    scripted.phases[job.job_id] = BackendState("exited", exit_code=0, reason="Completed")
    assert job.state().status is kc.JobStatus.SUCCEEDED

    # Two records written (terminal states are the outcome record itself), each once.
    assert sorted(_entries(gcs_emulator, prefix, job.job_id)) == [
        "PENDING-Unschedulable.json",
        "RUNNING-none.json",
    ]
    seen = kc.attach(job.job_id).history()
    assert [(t.status.value, t.reason) for t in seen] == [
        ("PENDING", "Unschedulable"),
        ("RUNNING", None),
        ("SUCCEEDED", None),
    ]
    assert "Insufficient tpu" in (seen[0].message or "")
    assert seen[0].duration is not None and seen[-1].duration is None

    assert main(["jobs", "history", job.job_id, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["history"]
    assert [t["reason"] for t in shown] == ["Unschedulable", None, None]
    monkeypatch.setenv("COLUMNS", "200")  # a table as wide as a terminal, not folded
    assert main(["jobs", "history", job.job_id]) == 0
    assert "Unschedulable" in capsys.readouterr().out


def test_history_entry_names_are_safe_whatever_the_reason_says() -> None:
    assert history.entry_name(kc.JobStatus.PENDING, "../../etc/passwd") == "PENDING-etcpasswd"
    assert history.entry_name(kc.JobStatus.RUNNING, None) == "RUNNING-none"


async def test_ahistory_is_the_async_twin(storage_uri: str) -> None:
    job = kc.submit(jobfns.add, (2, 3))
    await job.await_(timeout=60)
    statuses = [t.status for t in await job.ahistory()]
    assert statuses[-1] is kc.JobStatus.SUCCEEDED
    assert kc.JobStatus.RUNNING in statuses  # observed, or the runner's start record
