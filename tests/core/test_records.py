"""Stored records are bound to their job and storage; newer and broken records do not
break reading; reading works on read-only storage."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import kinetic_core as kc
from tests.core import jobfns

ROOT = Path(__file__).resolve().parents[2]


def _handle_path(storage_uri: str, job_id: str) -> Path:
    return Path(storage_uri[len("file://") :], "jobs", job_id, "handle.json")


# ---- forward compatibility and broken records (item 6) -------------------------------------


def test_handle_with_an_unknown_target_option_still_loads_and_lists(storage_uri: str) -> None:
    job = kc.submit(jobfns.add, (1, 2))
    assert job.result(timeout=60, cleanup=False) == 3
    path = _handle_path(storage_uri, job.job_id)
    data = json.loads(path.read_text())
    data["target"]["quantum_accelerator"] = "qpu-9"  # written by a newer version
    data["new_top_level_field"] = {"x": 1}
    path.write_text(json.dumps(data))
    again = kc.attach(job.job_id)
    assert again.state().status is kc.JobStatus.SUCCEEDED
    assert [h.job_id for h in kc.list_jobs(status="SUCCEEDED")] == [job.job_id]
    assert again.result(timeout=10) == 3
    # User-facing targets stay strict.
    with pytest.raises(kc.ConfigError, match="quantum_accelerator"):
        kc.Target.from_dict({"quantum_accelerator": "qpu-9"})


def test_a_truncated_handle_is_one_broken_entry_and_attach_says_which_file(
    storage_uri: str,
) -> None:
    good = kc.submit(jobfns.add, (1, 1))
    bad = kc.submit(jobfns.add, (2, 2))
    good.wait(60)
    bad.wait(60)
    path = _handle_path(storage_uri, bad.job_id)
    path.write_text(path.read_text()[:25])
    broken: list[kc.CorruptRecord] = []
    listed = kc.list_jobs(errors=broken)
    assert [h.job_id for h in listed] == [good.job_id]
    assert len(broken) == 1 and broken[0].job_id == bad.job_id
    assert str(path) in str(broken[0])
    assert [h.job_id for h in kc.list_jobs(status="SUCCEEDED")] == [good.job_id]
    with pytest.raises(kc.CorruptRecord) as info:
        kc.attach(bad.job_id)
    assert isinstance(info.value, kc.JobNotFound)
    assert str(path) in str(info.value) and "delete" in str(info.value)


# ---- records bound to their job and storage (item 5) ---------------------------------------


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


# ---- read-only storage (item 7) ------------------------------------------------------------

READER = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, {root!r})
    import kinetic_core as kc
    job = kc.attach({job_id!r})
    out = {{
        "state": job.state().status.value,
        "listed": [h.job_id for h in kc.list_jobs(status="SUCCEEDED")],
        "logs": job.logs(),
        "value": job.result(timeout=30, cleanup=False),
    }}
    print(json.dumps(out))
    """
)


def _read_only(argv: list[str]) -> list[str]:
    """Run ``argv`` so that file permissions bind it: as root that needs dropping the
    capabilities that bypass them (setpriv); otherwise chmod alone is enough."""
    if os.geteuid() != 0:
        return argv
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: cannot make storage read-only")
    drop = "-dac_override,-dac_read_search,-fowner"
    return [setpriv, "--inh-caps", drop, "--bounding-set", drop, "--", *argv]


@pytest.mark.timeout(120)
def test_reading_works_on_read_only_storage(storage_uri: str, tmp_path: Path) -> None:
    job = kc.submit(jobfns.chatty, (3,))
    job.wait(60)
    root = tmp_path / "store"
    for path in [root, *root.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        probe = subprocess.run(
            _read_only([sys.executable, "-c", f"open({str(root / 'probe')!r}, 'w')"]),
            capture_output=True,
        )
        assert probe.returncode != 0, "the storage root is still writable"
        out = subprocess.run(
            _read_only([sys.executable, "-c", READER.format(root=str(ROOT), job_id=job.job_id)]),
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert out.returncode == 0, out.stderr
        got = json.loads(out.stdout.strip().splitlines()[-1])
        assert got["state"] == "SUCCEEDED" and got["value"] == 3
        assert got["listed"] == [job.job_id]
        assert "line 2" in got["logs"]
        assert not (root / "jobs" / job.job_id / "collected.json").exists()
    finally:
        for path in [root, *root.rglob("*")]:
            path.chmod(0o700 if path.is_dir() else 0o600)
