"""``kinetic jobs cleanup`` deletes exactly the job's own stored keys (forged handles:
tests/fault/test_records_forged.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.cli import main
from tests.core import jobfns


def test_cleanup_frees_envelopes_keeps_tombstone_and_outputs(
    storage_uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    job = kc.submit(jobfns.write_output, ("model.txt", "weights"))
    path = Path(job.result(timeout=60, cleanup=False))
    folder = Path(storage_uri[len("file://") :], "jobs", job.job_id)
    assert (folder / "payload.pkl").exists() and (folder / "result.pkl").exists()
    other = kc.submit(jobfns.add, (1, 1))
    assert other.result(timeout=60, cleanup=False) == 2
    assert main(["jobs", "cleanup", job.job_id]) == 0
    assert f"{job.job_id}: cleaned up" in capsys.readouterr().out
    assert not (folder / "payload.pkl").exists() and not (folder / "result.pkl").exists()
    assert (folder / "handle.json").exists()  # the tombstone still resolves
    assert kc.attach(job.job_id).state().status is kc.JobStatus.SUCCEEDED
    assert path.read_text() == "weights"  # outputs stay unless --outputs
    other_folder = folder.parent / other.job_id
    assert (other_folder / "result.pkl").exists()  # another job is untouched
    assert main(["jobs", "cleanup", "--outputs", job.job_id]) == 0
    assert not path.exists()
