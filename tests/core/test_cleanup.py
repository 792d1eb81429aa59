"""``kinetic jobs cleanup`` deletes exactly the job's own stored keys, never anything a
forged record points at."""

from __future__ import annotations

import json
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
