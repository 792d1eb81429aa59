"""Forged or misplaced records are never acted on: a handle.json naming another job or
another storage root, an edited signed handle, a signed result copied between storage
roots. Nothing outside the job's own keys is deleted and no foreign value is returned."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.cli import main
from kinetic_core.records import layout
from kinetic_core.records.envelope import rebind_envelope
from kinetic_core.storage import open_storage
from tests.core import jobfns


def _handle_path(storage_uri: str, job_id: str) -> Path:
    return Path(storage_uri[len("file://") :], "jobs", job_id, "handle.json")


def test_handle_whose_job_id_does_not_match_its_folder_is_refused(
    storage_uri: str, tmp_path: Path
) -> None:
    victim = kc.submit(jobfns.add, (1, 1))
    victim.wait(60)
    outputs = tmp_path / "store" / "outputs" / victim.job_id
    outputs.mkdir(parents=True, exist_ok=True)
    (outputs / "keep.txt").write_text("precious")
    forged_dir = _handle_path(storage_uri, "job-forged-0001").parent
    forged_dir.mkdir(parents=True)
    data = json.loads(_handle_path(storage_uri, victim.job_id).read_text())
    (forged_dir / "handle.json").write_text(json.dumps(data))  # claims to be the victim
    with pytest.raises(kc.CorruptRecord, match="job-forged-0001"):
        kc.attach("job-forged-0001")
    broken: list[kc.CorruptRecord] = []
    assert [h.job_id for h in kc.list_jobs(errors=broken)] == [victim.job_id]
    assert [b.job_id for b in broken] == ["job-forged-0001"]
    # Listed from the job index (the scan above marked it complete), the copied folder has
    # no entry and is no job; with a forged entry too, its handle is refused all the same.
    entry = Path(
        storage_uri[len("file://") :], layout.index_entry(data["created_at"], "job-forged-0001")
    )
    entry.write_text("{}")
    again: list[kc.CorruptRecord] = []
    assert [h.job_id for h in kc.list_jobs(errors=again)] == [victim.job_id]
    assert [b.job_id for b in again] == ["job-forged-0001"]
    assert (outputs / "keep.txt").read_text() == "precious"
    assert _handle_path(storage_uri, victim.job_id).exists()


def test_handle_pointing_at_another_storage_is_refused(storage_uri: str, tmp_path: Path) -> None:
    other_root = tmp_path / "other"
    other = kc.submit(jobfns.add, (1, 1), target={"storage": f"file://{other_root}"})
    assert other.result(timeout=60, cleanup=False) == 2
    job = kc.submit(jobfns.add, (2, 2))
    job.wait(60)
    path = _handle_path(storage_uri, job.job_id)
    data = json.loads(path.read_text())
    data["storage"] = data["target"]["storage"] = f"file://{other_root}"
    data["job_id"] = job.job_id
    path.write_text(json.dumps(data))
    with pytest.raises(kc.CorruptRecord, match="storage"):
        kc.attach(job.job_id)
    # The other root's result is untouched (a cleanup through the forged handle would
    # have deleted it).
    assert (other_root / "jobs" / other.job_id / "result.pkl").exists()


def test_signed_handle_that_was_edited_is_refused(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KINETIC_SIGNING_KEY", "k1")
    job = kc.submit(jobfns.add, (3, 4))
    assert kc.attach(job.job_id).result(timeout=60, cleanup=False) == 7
    path = _handle_path(storage_uri, job.job_id)
    data = json.loads(path.read_text())
    assert "k1" not in path.read_text()
    data["target"]["local_dir"] = "/somewhere/else"
    path.write_text(json.dumps(data))
    with pytest.raises(kc.CorruptRecord, match="signature"):
        kc.attach(job.job_id)


def test_signed_result_copied_between_storage_roots_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KINETIC_SIGNING_KEY", "shared-key")
    a, b = f"file://{tmp_path / 'a'}", f"file://{tmp_path / 'b'}"
    ja = kc.submit(jobfns.add, (1, 1), target={"storage": a}, idempotency_key="nightly")
    jb = kc.submit(jobfns.add, (50, 50), target={"storage": b}, idempotency_key="nightly")
    assert ja.job_id == jb.job_id
    assert ja.result(timeout=60, cleanup=False) == 2
    assert jb.result(timeout=60, cleanup=False) == 100
    src = tmp_path / "a" / "jobs" / ja.job_id / "result.pkl"
    dst = tmp_path / "b" / "jobs" / jb.job_id / "result.pkl"
    shutil.copyfile(src, dst)
    with pytest.raises(kc.PayloadIntegrityError) as info:
        jb.result(timeout=10, cleanup=False)
    assert a in str(info.value) and b in str(info.value)
    assert jb.job_id in str(info.value)


def test_a_signed_call_copied_between_storage_roots_is_not_re_signed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Re-binding a call to its next attempt (recovery, batch retries) checks the storage
    root the call was signed for, as reading it does: a copy from another root is refused
    instead of being re-signed for this one."""
    monkeypatch.setenv("KINETIC_SIGNING_KEY", "shared-key")
    a, b = f"file://{tmp_path / 'a'}", f"file://{tmp_path / 'b'}"
    ja = kc.submit(jobfns.add, (1, 1), target={"storage": a}, idempotency_key="nightly")
    jb = kc.submit(jobfns.add, (50, 50), target={"storage": b}, idempotency_key="nightly")
    ja.wait(timeout=60)
    jb.wait(timeout=60)
    src = tmp_path / "a" / "jobs" / ja.job_id / "payload.pkl"
    shutil.copyfile(src, tmp_path / "b" / "jobs" / jb.job_id / "payload.pkl")
    storage = open_storage(b)
    refused = pytest.raises(kc.PayloadIntegrityError, match="copied between storage roots")
    with refused, storage.open_write("jobs/rebound/payload.pkl", create_only=True) as fh:
        rebind_envelope(
            storage,
            layout.job_file(jb.job_id, layout.PAYLOAD),
            fh,
            kind="call",
            job_id=jb.job_id,
            new_job_id="rebound",
            signing_key="shared-key",
        )
    assert not storage.exists("jobs/rebound/payload.pkl")  # nothing half-written is left


def test_cleanup_through_a_forged_handle_deletes_nothing(
    storage_uri: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    victim_root = tmp_path / "victim"
    victim = kc.submit(jobfns.add, (2, 3), target={"storage": f"file://{victim_root}"})
    assert victim.result(timeout=60, cleanup=False) == 5
    forged = Path(storage_uri[len("file://") :], "jobs", victim.job_id)
    forged.mkdir(parents=True)
    (forged / "handle.json").write_text(json.dumps(json.loads(victim.to_json())))
    assert main(["jobs", "cleanup", "--outputs", victim.job_id]) == 2
    err = capsys.readouterr().err
    assert str(forged / "handle.json") in err and "not acted on" in err
    kept = victim_root / "jobs" / victim.job_id
    assert (kept / "result.pkl").exists() and (kept / "payload.pkl").exists()
    assert (
        kc.attach(victim.job_id, target={"storage": f"file://{victim_root}"}).result(timeout=10)
        == 5
    )
