"""The data plane on real detached jobs: Data arguments, output folders, checkpoints.

Each test runs on file:// storage and, where storage matters, on gs:// (the GCS emulator
with the real client); jobs run on the local backend.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import kinetic_core as kc
from kinetic_core.storage import open_storage
from tests.core import jobfns


@dataclass
class Config:
    data: object
    epochs: int = 1


@pytest.fixture(params=["file", "gs"])
def any_storage(
    request: pytest.FixtureRequest, storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> str:
    if request.param == "file":
        return storage_uri
    emulator = request.getfixturevalue("gcs_emulator")
    uri = emulator.uri(f"data-{os.urandom(4).hex()}")
    monkeypatch.setenv("KINETIC_STORAGE", uri)
    return uri


def _tree(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("alpha")
    (root / "sub" / "b.txt").write_text("beta")
    return root


def test_data_arrives_as_plain_paths_anywhere_in_the_arguments(
    any_storage: str, tmp_path: Path
) -> None:
    folder = _tree(tmp_path / "src")
    single = tmp_path / "one.txt"
    single.write_text("one")
    job = kc.submit(
        jobfns.describe,
        ([kc.Data(str(folder)), {"k": (kc.Data(f"file://{single}"),)}, Config(kc.Data(folder))],),
    )
    folder_view = ["path", {"a.txt": "alpha", os.path.join("sub", "b.txt"): "beta"}]
    assert job.result(timeout=60) == [
        folder_view,
        {"k": [["path", {"one.txt": "one"}]]},
        {"data": folder_view, "epochs": "1"},
    ]


def test_unchanged_data_is_uploaded_once(any_storage: str, tmp_path: Path) -> None:
    folder = _tree(tmp_path / "src")
    storage = open_storage(any_storage)
    kc.submit(jobfns.read_tree, (kc.Data(folder),)).result(timeout=60)

    def uploaded() -> list[str]:  # (data/refs: which job reads what, one record per job)
        return [n for n in storage.walk("data") if not n.startswith("refs/")]

    stored = uploaded()
    digest = kc.Data(folder).content_hash()
    assert f"{digest}.json" in stored
    assert sum(name.startswith("blobs/") for name in stored) == 2  # one object per file
    (tmp_path / "elsewhere").mkdir()
    os.rename(folder, tmp_path / "elsewhere" / "src")  # same content, another place
    moved = kc.Data(tmp_path / "elsewhere" / "src")
    assert moved.content_hash() == digest
    assert kc.submit(jobfns.read_tree, (moved,)).result(timeout=60)["a.txt"] == "alpha"
    assert uploaded() == stored  # nothing new was uploaded


def test_content_hash_covers_names_and_contents(tmp_path: Path) -> None:
    folder = _tree(tmp_path / "src")
    first = kc.Data(folder).content_hash()
    (folder / "a.txt").write_text("changed")
    assert kc.Data(folder).content_hash() != first
    (folder / "a.txt").write_text("alpha")
    assert kc.Data(folder).content_hash() == first
    os.rename(folder / "a.txt", folder / "c.txt")
    assert kc.Data(folder).content_hash() != first
    (tmp_path / "link.txt").symlink_to(folder / "c.txt")
    (tmp_path / "c.txt").write_text("alpha")
    # A symlink counts as what it points at; a file differs from a folder holding it.
    assert (
        kc.Data(tmp_path / "link.txt").content_hash() != kc.Data(tmp_path / "c.txt").content_hash()
    )
    assert kc.Data(folder / "c.txt").content_hash() == kc.Data(tmp_path / "c.txt").content_hash()


def test_the_job_cannot_corrupt_the_source(storage_uri: str, tmp_path: Path) -> None:
    source = tmp_path / "weights.bin"
    source.write_text("original")
    outcome = kc.submit(jobfns.try_overwrite, (kc.Data(source),)).result(timeout=60)
    assert source.read_text() == "original"
    if os.getuid() != 0:  # root ignores file modes
        assert outcome == "PermissionError"


def _assert_nothing_written(uri: str) -> None:
    storage = open_storage(uri)
    assert storage.list_names("") in ([], ["tmp"])


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda p: kc.Data(p / "missing"), "does not exist"),
        (lambda p: kc.Data(_loop(p)), "symlink loop"),
        (lambda p: kc.Data(_broken(p)), "broken symlink"),
    ],
)
def test_bad_data_fails_before_anything_is_written(
    storage_uri: str, tmp_path: Path, make: object, match: str
) -> None:
    ok = tmp_path / "ok.txt"
    ok.write_text("ok")
    with pytest.raises(kc.SubmissionError, match=match):
        kc.submit(jobfns.describe, ([kc.Data(ok), make(tmp_path)],))  # type: ignore[operator]
    _assert_nothing_written(storage_uri)


@pytest.mark.parametrize("uri", ["hf://datasets/org/name", "s3://bucket/key", "https://x/y"])
def test_a_data_uri_of_another_scheme_says_it_is_not_supported(uri: str) -> None:
    """Issue 35 item 5: ``Data("hf://...")`` was accepted, then "does not exist"."""
    with pytest.raises(kc.ConfigError, match=f"{uri.split(':')[0]}:// is not supported"):
        kc.Data(uri)


def _loop(tmp: Path) -> Path:
    (tmp / "looped").mkdir()
    (tmp / "looped" / "back").symlink_to(tmp / "looped")
    return tmp / "looped"


def _broken(tmp: Path) -> Path:
    (tmp / "dangling").symlink_to(tmp / "nowhere")
    return tmp / "dangling"


def test_unreadable_file_fails_before_anything_is_written(storage_uri: str, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("x")
    secret.chmod(0)
    if os.getuid() == 0:  # root reads every mode-0 file; not a write-only procfs file
        secret = Path("/proc/sys/vm/drop_caches")
    with pytest.raises(kc.SubmissionError, match="not readable"):
        kc.submit(jobfns.describe, (kc.Data(secret),))
    _assert_nothing_written(storage_uri)


def test_missing_gs_object_fails_before_anything_is_written(
    storage_uri: str, gcs_emulator: object, tmp_path: Path
) -> None:
    with pytest.raises(kc.SubmissionError, match="does not exist"):
        kc.submit(jobfns.describe, (kc.Data("gs://kinetic-test/no/such/object.bin"),))
    with pytest.raises(kc.SubmissionError, match="no object exists under that prefix"):
        kc.submit(jobfns.describe, (kc.Data("gs://kinetic-test/no/such/prefix/"),))
    _assert_nothing_written(storage_uri)


def test_gs_data_is_downloaded_into_the_job(gcs_emulator: object, storage_uri: str) -> None:
    source = open_storage("gs://kinetic-test")
    source.write_bytes("inputs-x/train/a.txt", b"A")
    source.write_bytes("inputs-x/train/deep/b.txt", b"B")
    job = kc.submit(
        jobfns.describe,
        (
            [
                kc.Data("gs://kinetic-test/inputs-x/train/"),
                kc.Data("gs://kinetic-test/inputs-x/train/a.txt", fuse=True),
            ],
        ),
    )
    assert job.result(timeout=60) == [
        ["path", {"a.txt": "A", os.path.join("deep", "b.txt"): "B"}],
        ["path", {"a.txt": "A"}],
    ]


@pytest.mark.parametrize(
    "volumes, backend, match",
    [
        ({"relative/path": "DATA"}, "kubernetes", "must be absolute"),
        ({"/data": "DATA", "/data/train": "DATA"}, "kubernetes", "collide"),
        ({"/data": "DATA", "/data/": "DATA"}, "kubernetes", "collide"),
        ({"/data": "DATA"}, "local", "local backend cannot honour a mount path"),
    ],
)
def test_bad_volumes_fail_before_anything_is_written(
    storage_uri: str, tmp_path: Path, volumes: dict[str, str], backend: str, match: str
) -> None:
    (tmp_path / "d.txt").write_text("d")
    data = kc.Data(tmp_path / "d.txt")
    with pytest.raises(kc.ConfigError, match=match):
        kc.submit(
            jobfns.add,
            (1,),
            target={"backend": backend},
            volumes={path: data for path in volumes},
        )
    _assert_nothing_written(storage_uri)


# ---- outputs ---------------------------------------------------------------------------------
def test_outputs_are_a_local_folder_synced_to_storage(any_storage: str, tmp_path: Path) -> None:
    job = kc.submit(jobfns.write_output, ("model.txt", "weights"))
    path = job.result(timeout=60)
    assert not path.startswith("gs:")
    fetched = job.download_outputs(tmp_path / "got")
    assert (Path(fetched) / "model.txt").read_text() == "weights"
    # The next job reads this job's outputs as a Data folder.
    assert kc.submit(jobfns.read_tree, (job.outputs,)).result(timeout=60) == {
        "model.txt": "weights"
    }


@pytest.mark.parametrize("then", ["fail", "cancel", "life_span"])
def test_outputs_are_synced_however_the_job_ends(
    gcs_emulator: object,
    storage_uri: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    then: str,
) -> None:
    uri = f"gs://kinetic-test/ends-{os.urandom(4).hex()}"
    monkeypatch.setenv("KINETIC_STORAGE", uri)
    target = {"life_span": 15} if then == "life_span" else None
    ready = tmp_path / "ready"
    job = kc.submit(
        jobfns.write_then,
        ("partial.txt", "fail" if then == "fail" else "sleep", 120, str(ready)),
        target=target,
    )
    if then != "fail":
        _wait_for(ready)
    if then == "cancel":
        job.cancel()
    state = job.wait(timeout=90)
    assert state.status.terminal and state.status is not kc.JobStatus.SUCCEEDED
    got = Path(job.download_outputs(tmp_path / "got"))
    assert (got / "partial.txt").read_text() == f"{uri}/outputs/{job.job_id}"


def _wait_for(path: Path) -> None:
    import time

    for _ in range(1200):
        if path.exists():
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def test_sync_outputs_sends_only_what_changed(
    gcs_emulator: object, storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KINETIC_STORAGE", f"gs://kinetic-test/sync-{os.urandom(4).hex()}")
    assert kc.submit(jobfns.sync_counts).result(timeout=60) == [1, 0, 1]
    assert kc.sync_outputs() == 0  # outside a job: nothing to do


# ---- checkpoints -----------------------------------------------------------------------------
def test_next_attempt_of_a_key_starts_with_the_last_checkpoint(any_storage: str) -> None:
    key = f"ckpt-{os.urandom(4).hex()}"
    first = kc.submit(jobfns.checkpointed, (5, 3), idempotency_key=key)
    with pytest.raises(RuntimeError, match="failed at step 3"):
        first.result(timeout=60)
    second = kc.submit(jobfns.checkpointed, (5, 3), idempotency_key=key)
    assert second.attempt == 2
    assert second.result(timeout=60) == [0, 1, 2, 3, 4]
    # attempt 2's own outputs hold the finished checkpoint (what attempt 3 would inherit)
    storage = open_storage(any_storage)
    assert "ckpt.json" in storage.walk(f"outputs/{second.job_id}")


def test_regression_output_dir_on_gs_storage_is_a_local_folder(
    gcs_emulator: object, storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 11: on gs:// storage KINETIC_OUTPUT_DIR was a 'gs://...' string, so open()
    wrote to a local folder named './gs:/...' that no other machine could read."""
    monkeypatch.setenv("KINETIC_STORAGE", f"gs://kinetic-test/reg-{os.urandom(4).hex()}")
    job = kc.submit(jobfns.write_output, ("model.txt", "weights"))
    path = job.result(timeout=60)
    assert os.path.isabs(path) and "gs:" not in path
    stored = open_storage(os.environ["KINETIC_STORAGE"]).read_bytes(
        f"outputs/{job.job_id}/model.txt"
    )
    assert stored == b"weights"


def test_an_attempt_created_outside_submit_inherits_too(any_storage: str) -> None:
    """Inheritance lives in the job: an attempt made by anything that creates attempt N+1 of
    a key with its deterministic id (a recovery, a batch retry) starts with N's outputs."""
    from kinetic_core.config.target import Target
    from kinetic_core.jobs.submission import _Submission
    from kinetic_core.util.ids import keyed_id

    key = f"recover-{os.urandom(4).hex()}"
    first = kc.submit(jobfns.checkpointed, (4, 2), idempotency_key=key)
    with pytest.raises(RuntimeError):
        first.result(timeout=60)
    call = {"fn": jobfns.checkpointed, "args": (4, 2), "kwargs": {}, "env": {}}
    plan = _Submission(Target().resolve(), call, [], "recovered", {})
    second = plan.create(keyed_id(key, 2), attempt=2, key=key)
    assert second.result(timeout=60) == [0, 1, 2, 3]


def test_a_result_reference_output_dir_is_readable_as_data(any_storage: str) -> None:
    """What a result by reference names (``output_dir``: a path or a gs:// URI without a
    trailing slash) is a Data the next job reads as its folder."""
    job = kc.submit(jobfns.write_output, ("metrics.json", '{"r2": 1}'))
    job.result(timeout=60)
    nxt = kc.submit(jobfns.read_tree, (kc.Data(job.output_dir),))
    assert nxt.result(timeout=60) == {"metrics.json": '{"r2": 1}'}


def test_the_outputs_of_a_job_that_wrote_nothing_arrive_as_an_empty_folder(
    any_storage: str,
) -> None:
    """Regression: on gs:// storage the next job's submit failed ("no object exists under
    that prefix") where file:// handed over an empty folder: a pipeline broke only on GKE."""
    job = kc.submit(jobfns.add, (1, 2))
    job.result(timeout=60)
    for outputs in (job.outputs, kc.Data(job.output_dir)):
        assert kc.submit(jobfns.read_tree, (outputs,)).result(timeout=60) == {}


def test_an_empty_prefix_that_is_no_job_outputs_is_still_an_error(
    gcs_emulator: Any, storage_uri: str
) -> None:
    for uri in ("nothing/here/", "nothing", "outputs/"):
        with pytest.raises(kc.SubmissionError, match=r"(no object exists|does not exist)"):
            kc.submit(jobfns.read_tree, (kc.Data(gcs_emulator.uri(uri)),))
    job_id = "a" * 12
    with pytest.raises(kc.SubmissionError, match="does not exist"):  # no such job
        kc.submit(jobfns.read_tree, (kc.Data(gcs_emulator.uri(f"root/outputs/{job_id}")),))


def test_an_empty_folder_arrives_empty(storage_uri: str, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert kc.submit(jobfns.describe, (kc.Data(tmp_path / "empty"),)).result(timeout=60) == [
        "path",
        {},
    ]


def test_an_interrupted_upload_leaves_nothing_that_reads_as_complete(
    gcs_emulator: Any, storage_uri: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    uri = f"gs://kinetic-test/cut-{os.urandom(4).hex()}"
    monkeypatch.setenv("KINETIC_STORAGE", uri)
    folder = _tree(tmp_path / "src")
    gcs_emulator.server.fail_next(1000, status=403, match="blobs")  # not retried: fails now
    with pytest.raises(kc.StorageError):
        kc.submit(jobfns.read_tree, (kc.Data(folder),))
    gcs_emulator.server.fail_next(0)
    storage = open_storage(uri)
    assert not [n for n in storage.list_names("data") if n.endswith(".json")]  # no manifest
    assert storage.list_names("jobs") == []  # and no job
    job = kc.submit(jobfns.read_tree, (kc.Data(folder),))  # the next submit completes it
    assert job.result(timeout=60)["a.txt"] == "alpha"


def test_run_decorator_passes_volumes(storage_uri: str, tmp_path: Path) -> None:
    (tmp_path / "d.txt").write_text("d")
    remote = kc.run(jobfns.add, volumes={"/data": kc.Data(tmp_path / "d.txt")})
    with pytest.raises(kc.ConfigError, match="local backend cannot honour a mount path"):
        remote.run_async(1)
    _assert_nothing_written(storage_uri)
