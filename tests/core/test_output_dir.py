"""``output_dir=``: a job's outputs in a place the user chose, on real local jobs.

The job store stays file:// (``storage_uri``); the output_dir is a file:// folder or a
gs:// prefix on the GCS emulator. Each job writes under ``{output_dir}/{job_id}/``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.data import outputs
from kinetic_core.errors import ConfigError
from kinetic_core.storage import open_storage
from tests.core import jobfns, outdebug_fns


@pytest.fixture(params=["file", "gs"])
def out_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return f"file://{tmp_path / 'models'}"
    emulator = request.getfixturevalue("gcs_emulator")
    return str(emulator.uri(f"models-{os.urandom(4).hex()}"))


def test_outputs_go_to_output_dir_and_every_handle_finds_them(
    storage_uri: str, out_uri: str, tmp_path: Path
) -> None:
    job = kc.submit(jobfns.write_output, ("model.txt", "weights"), output_dir=out_uri)
    job.result(timeout=60)
    stored = open_storage(out_uri).read_bytes(f"{job.job_id}/model.txt")
    assert stored == b"weights"
    assert not open_storage(storage_uri).walk(f"outputs/{job.job_id}")  # not the default place
    assert job.output_dir.rstrip("/").endswith(f"{out_uri.rsplit('/', 1)[1]}/{job.job_id}")
    again = kc.attach(job.job_id)  # another process or machine: the handle names the place
    assert again.target["output_dir"] == out_uri
    for handle in (job, again):
        got = Path(handle.download_outputs(tmp_path / f"got-{id(handle)}"))
        assert (got / "model.txt").read_text() == "weights"
    nxt = kc.submit(jobfns.read_tree, (again.outputs,))
    assert nxt.result(timeout=60) == {"model.txt": "weights"}


def test_run_decorator_and_options_take_output_dir(storage_uri: str, tmp_path: Path) -> None:
    out = tmp_path / "decorated"
    fn = kc.run(jobfns.write_output, output_dir=str(out))  # a plain absolute path: file://
    job = fn.run_async("m.txt", "x")
    job.result(timeout=60)
    assert (out / job.job_id / "m.txt").read_text() == "x"
    other = fn.options(output_dir=f"file://{tmp_path / 'elsewhere'}").run_async("m.txt", "y")
    other.result(timeout=60)
    assert (tmp_path / "elsewhere" / other.job_id / "m.txt").read_text() == "y"


def test_two_jobs_with_one_output_dir_at_once_keep_their_own_files(
    storage_uri: str, out_uri: str, tmp_path: Path
) -> None:
    """Nightly runs pointed at one folder: both run at once, both write model.txt; each
    keeps its own under its job id, neither overwrites nor deletes the other's."""
    a_ready, b_ready = str(tmp_path / "a"), str(tmp_path / "b")
    a = kc.submit(
        outdebug_fns.write_and_meet, ("model.txt", "A", a_ready, b_ready), output_dir=out_uri
    )
    b = kc.submit(
        outdebug_fns.write_and_meet, ("model.txt", "B", b_ready, a_ready), output_dir=out_uri
    )
    a.result(timeout=90)
    b.result(timeout=90)
    folder = open_storage(out_uri)
    assert sorted(folder.walk("")) == sorted([f"{a.job_id}/model.txt", f"{b.job_id}/model.txt"])
    for job, text in ((a, "A"), (b, "B")):
        got = Path(job.download_outputs(tmp_path / f"got-{text}"))
        assert (got / "model.txt").read_text() == text
    a.cleanup(outputs=True)  # deletes its own folder only
    assert folder.walk("") == [f"{b.job_id}/model.txt"]


def test_checkpoint_resume_across_attempts_uses_output_dir(storage_uri: str, out_uri: str) -> None:
    key = f"ckpt-{os.urandom(4).hex()}"
    first = kc.submit(jobfns.checkpointed, (5, 3), idempotency_key=key, output_dir=out_uri)
    with pytest.raises(RuntimeError, match="failed at step 3"):
        first.result(timeout=60)
    second = kc.submit(jobfns.checkpointed, (5, 3), idempotency_key=key, output_dir=out_uri)
    assert second.attempt == 2
    assert second.result(timeout=60) == [0, 1, 2, 3, 4]
    assert "ckpt.json" in open_storage(out_uri).walk(second.job_id)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda root, tmp: "relative/models", "not a storage location"),
        (lambda root, tmp: "s3://bucket/models", "not a storage location"),
        (lambda root, tmp: "file://relative/models", "relative path"),
        (lambda root, tmp: 42, "not a storage location"),
        (lambda root, tmp: f"{root}/jobs/mine", "inside the job store"),
        (lambda root, tmp: f"{root}/jobs", "inside the job store"),
        (lambda root, tmp: root, "inside the job store"),
        (lambda root, tmp: f"{root}/keys/x", "inside the job store"),
    ],
)
def test_bad_output_dir_is_a_config_error_before_anything_is_written(
    storage_uri: str, tmp_path: Path, make: object, match: str
) -> None:
    bad = make(storage_uri, tmp_path)  # type: ignore[operator]
    with pytest.raises(ConfigError, match=match):
        kc.submit(jobfns.add, (1, 2), output_dir=bad)
    with pytest.raises(ConfigError, match=match):
        kc.run(jobfns.add, output_dir=bad).run_async(1, 2)
    assert open_storage(storage_uri).list_names("") in ([], ["tmp"])


def test_an_output_dir_under_the_store_outputs_folder_is_fine(storage_uri: str) -> None:
    job = kc.submit(jobfns.write_output, ("m.txt", "z"), output_dir=f"{storage_uri}/outputs/team")
    job.result(timeout=60)
    assert open_storage(storage_uri).read_bytes(f"outputs/team/{job.job_id}/m.txt") == b"z"


def test_kinetic_output_dir_in_the_environment_is_not_the_option(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Inside a job KINETIC_OUTPUT_DIR is the job's own folder: a job that submits another
    must not hand it that folder as its output_dir."""
    monkeypatch.setenv("KINETIC_OUTPUT_DIR", str(tmp_path / "a-running-jobs-folder"))
    monkeypatch.setenv("KINETIC_DEBUG", "yes please")
    resolved = kc.Target().resolve()
    assert resolved.output_dir is None and resolved.debug is None


def test_with_a_signing_key_the_signed_handle_names_the_place(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The job follows the output_dir of its own handle.json only when its signature holds."""
    monkeypatch.setenv("KINETIC_SIGNING_KEY", "s3cret")
    out = tmp_path / "signed"
    key = f"signed-{os.urandom(4).hex()}"
    first = kc.submit(jobfns.checkpointed, (4, 2), idempotency_key=key, output_dir=str(out))
    with pytest.raises(RuntimeError):
        first.result(timeout=60)
    second = kc.submit(jobfns.checkpointed, (4, 2), idempotency_key=key, output_dir=str(out))
    assert second.result(timeout=60) == [0, 1, 2, 3]
    assert (out / second.job_id / "ckpt.json").exists()
    assert not open_storage(storage_uri).walk("outputs")


def test_an_unreachable_output_dir_is_refused_at_submit(
    storage_uri: str, tmp_path: Path, gcs_emulator: object
) -> None:
    """Issue 35 item 1: an output_dir nothing could write to was found only by the job's
    last sync, after it read SUCCEEDED."""
    afile = tmp_path / "afile"
    afile.write_text("")
    for bad, match in (
        (f"gs://no-such-bucket-{os.urandom(3).hex()}/models", "does not exist"),
        (f"file://{afile}/models", "not a folder this user can write to"),
    ):
        with pytest.raises(kc.StorageError, match=match) as err:
            kc.submit(jobfns.add, (1, 2), output_dir=bad)
        assert "output_dir" in str(err.value)
        assert open_storage(storage_uri).list_names("") in ([], ["tmp"])


def test_outputs_that_did_not_arrive_never_read_as_a_success(
    storage_uri: str, gcs_emulator: object
) -> None:
    """Issue 35 item 1: the final sync failed (one log line), the job read SUCCEEDED,
    ``result()`` returned and the only copy of the files was deleted."""
    out = gcs_emulator.uri(f"models-{os.urandom(4).hex()}")  # type: ignore[attr-defined]
    gcs_emulator.fail_next(10_000, 403, match="lost-model.txt")  # type: ignore[attr-defined]
    try:
        job = kc.submit(jobfns.write_output, ("lost-model.txt", "weights"), output_dir=out)
        state = job.wait(timeout=60)
    finally:
        gcs_emulator.fail_next(0)  # type: ignore[attr-defined]
    assert state.status is kc.JobStatus.FAILED and state.reason == "OutputsNotSynced", state
    with pytest.raises(kc.OutputsNotSynced, match="final sync of its outputs failed") as err:
        job.result(timeout=30)
    assert isinstance(err.value, kc.StorageError)
    kept = Path(outputs.local_root(job.job_id), "out")
    assert str(kept) in str(err.value)  # the message says where the files are
    assert (kept / "lost-model.txt").read_text() == "weights"  # the only copy is kept
    shutil.rmtree(kept.parent)


def test_finish_removes_a_local_folder_a_job_with_outputs_in_storage_made(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job whose outputs live in file:// storage itself skips the search for its local
    folder at ``finish`` (issue 37), unless it made one (data downloaded from gs://, say):
    that one is still removed."""
    for name in ("DIR", "URI", "ROOT"):  # what prepare() exports for the job
        monkeypatch.delenv(f"KINETIC_OUTPUT_{name}", raising=False)
    monkeypatch.delenv("KINETIC_JOB_STORAGE", raising=False)
    storage = open_storage(storage_uri)
    in_place, downloaded = (f"t-20261128t000000-{os.urandom(4).hex()}" for _ in range(2))
    for job_id in (in_place, downloaded):
        out = outputs.prepare(storage, job_id, None)
        assert out == storage.local_path(f"outputs/{job_id}")  # in storage itself
    scratch = Path(outputs.local_root(downloaded), "data")  # what the runner downloads into
    scratch.mkdir(parents=True)
    (scratch / "shard-0").write_bytes(b"x")
    assert outputs.finish(storage_uri, in_place) is None
    assert outputs.finish(storage_uri, downloaded) is None
    assert not scratch.parent.exists()
    assert not Path(outputs.local_root(in_place)).exists()
