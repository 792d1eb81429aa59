"""``kinetic jobs cleanup`` deletes exactly the job's own stored keys (forged handles:
tests/fault/test_records_forged.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.cli import main
from tests.core import jobfns
from tests.core.batch_helpers import wait_for


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


def _decided_by_its_runner(storage_uri: str, tmp_path: Path) -> kc.JobHandle:
    """A running job whose outcome is decided as its runner decides it, before the rest of
    its work (here: the rest of the function, 0.3 s on) and its exit."""
    import threading

    from kinetic_core.records import lifecycle
    from kinetic_core.storage import open_storage

    gate, ready = tmp_path / "gate", tmp_path / "ready"
    job = kc.submit(jobfns.wait_for_file, (str(gate), "done"), {"ready": str(ready)})
    wait_for(str(ready))
    lifecycle.decide(
        open_storage(storage_uri), job.job_id, "SUCCEEDED", None, None, by=lifecycle.BY_RUNNER
    )
    threading.Timer(0.3, gate.touch).start()
    return job


def test_cleanup_lets_a_decided_job_finish_instead_of_killing_it(
    storage_uri: str, tmp_path: Path
) -> None:
    """A job reads terminal once its outcome is decided, while its runner still writes its
    last records and exits; ``result()`` cleans up right then. The cleanup must let it end
    on its own (it did SIGTERM it: its finished record was never written)."""
    job = _decided_by_its_runner(storage_uri, tmp_path)
    job.cleanup()
    folder = Path(storage_uri[len("file://") :], "jobs", job.job_id)
    assert (folder / "finished.json").exists(), "the ending job was stopped by the cleanup"
    assert job.state().status is kc.JobStatus.SUCCEEDED


def test_a_local_job_reads_terminal_only_once_its_processes_are_gone(
    storage_uri: str, tmp_path: Path
) -> None:
    """The runner decides the outcome, then writes its last records and exits, and its
    supervisor records the exit: a read in between must wait for them (docs/concepts.md:
    a job reads terminal only once none of its processes is alive)."""
    job = _decided_by_its_runner(storage_uri, tmp_path)
    assert job.state().status is kc.JobStatus.SUCCEEDED
    exit_record = Path(storage_uri[len("file://") :], "backend-local", job.job_id, "exit.json")
    assert exit_record.exists(), "read terminal while the job's processes were still running"
