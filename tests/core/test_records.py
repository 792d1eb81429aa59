"""Newer and broken handle records do not break reading; reading works on read-only storage.

Forged records: tests/fault/test_records_forged.py."""

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
