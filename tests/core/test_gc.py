"""``kinetic gc`` on real jobs (local backend) over file:// and the GCS emulator: what goes,
what stays, the data protocol against concurrent submitters, and a gc killed mid-way."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.cli.app import run as cli_main
from kinetic_core.records import layout
from kinetic_core.storage import open_storage
from tests.core import jobfns

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["file", "gs"])
def any_storage(
    request: pytest.FixtureRequest, storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> str:
    if request.param == "file":
        return storage_uri
    emulator = request.getfixturevalue("gcs_emulator")
    uri = emulator.uri(f"gc-{os.urandom(4).hex()}")
    monkeypatch.setenv("KINETIC_STORAGE", uri)
    return uri


def _collected(*args: object, **options: object) -> kc.JobHandle:
    """A job that ran ``add`` and whose result was read (and cleaned up, as result() does)."""
    handle = kc.submit(jobfns.add, args or (1, 2), **options)  # type: ignore[arg-type]
    handle.result(timeout=60)
    return handle


def _files(uri: str) -> list[str]:
    return sorted(open_storage(uri).walk(""))


def _gone(uri: str, handle: kc.JobHandle) -> bool:
    """Nothing of the job is left: its folder, its outputs, its listing index entries."""
    storage = open_storage(uri)
    bucket = layout.index_bucket(handle.created_at)
    return (
        not storage.walk(layout.job_dir(handle.job_id))
        and not storage.walk(layout.outputs(handle.job_id))
        and not [n for n in storage.list_names(bucket) if handle.job_id in n]
    )


def test_ended_jobs_go_once_past_the_age(any_storage: str) -> None:
    handle = _collected()
    report = kc.collect_garbage("1h", dry_run=False)
    assert report.jobs == [] and report.kept == {"recent": 1}
    assert kc.attach(handle.job_id).state().status is kc.JobStatus.SUCCEEDED

    report = kc.collect_garbage(0, dry_run=False)
    assert report.jobs == [handle.job_id]
    assert _gone(any_storage, handle)
    with pytest.raises(kc.JobNotFound):
        kc.attach(handle.job_id)
    assert kc.list_jobs() == []


def test_the_local_backend_records_go_too(storage_uri: str, tmp_path: Path) -> None:
    local_dir = tmp_path / "local"
    handle = kc.submit(jobfns.add, (1, 2), target={"local_dir": str(local_dir)})
    handle.wait(timeout=60)  # not collected: nothing cleaned it up
    assert (local_dir / handle.job_id).exists()
    assert kc.collect_garbage(0, dry_run=False, include_uncollected=True).jobs == [handle.job_id]
    assert not (local_dir / handle.job_id).exists()


def test_pinned_jobs_stay(storage_uri: str) -> None:
    pinned = _collected(keep=True)
    remote = kc.run(jobfns.add, keep=True)
    assert remote(2, 3) == 5
    report = kc.collect_garbage(0, dry_run=False, include_uncollected=True)
    assert report.jobs == [] and report.kept == {"pinned": 2}
    assert kc.attach(pinned.job_id).keep
    assert len(kc.list_jobs()) == 2


def test_uncollected_results_stay_unless_asked(storage_uri: str) -> None:
    handle = kc.submit(jobfns.add, (1, 2))
    handle.wait(timeout=60)
    failed = kc.submit(jobfns.fail, ("boom",))
    failed.wait(timeout=60)
    report = kc.collect_garbage(0, dry_run=False)
    assert report.jobs == [failed.job_id] and report.kept == {"uncollected": 1}
    assert kc.attach(handle.job_id).result(timeout=5, cleanup=False) == 3
    handle.wait(timeout=5)  # collected now: goes without the flag
    assert kc.collect_garbage(0, dry_run=False).jobs == [handle.job_id]

    other = kc.submit(jobfns.add, (1, 1))
    other.wait(timeout=60)
    assert kc.collect_garbage(0, dry_run=False, include_uncollected=True).jobs == [other.job_id]


def test_a_running_job_is_never_touched(storage_uri: str) -> None:
    handle = kc.submit(jobfns.sleep, (60,))
    try:
        report = kc.collect_garbage(0, dry_run=False, include_uncollected=True)
        assert report.jobs == [] and report.kept == {"running": 1}
        assert not handle.state().terminal
    finally:
        handle.cancel()
    assert kc.collect_garbage(0, dry_run=False, include_uncollected=True).jobs == [handle.job_id]


def test_dry_run_removes_nothing_and_reports_what_a_run_removes(
    any_storage: str, tmp_path: Path
) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.txt").write_text("x")
    first = _collected()
    kc.submit(jobfns.read_tree, (kc.Data(str(tmp_path / "d")),)).result(timeout=60)
    kept = kc.submit(jobfns.add, (1, 2), keep=True)
    kept.wait(timeout=60)
    before = _files(any_storage)

    dry = kc.collect_garbage(0, dry_run=True)
    assert set(before) <= set(_files(any_storage))  # (readers may add history records)
    assert first.job_id in dry.jobs and len(dry.jobs) == 2 and dry.blobs and dry.data

    real = kc.collect_garbage(0, dry_run=False)
    assert (real.jobs, real.batches, real.data, real.blobs, real.bytes, real.kept) == (
        dry.jobs,
        dry.batches,
        dry.data,
        dry.blobs,
        dry.bytes,
        dry.kept,
    )
    assert not real.dry_run and not set(before) <= set(_files(any_storage))


def test_data_no_kept_job_uses_goes_and_shared_blobs_stay(any_storage: str, tmp_path: Path) -> None:
    shared, only = tmp_path / "a", tmp_path / "b"
    for folder in (shared, only):
        folder.mkdir()
        (folder / "common.txt").write_text("the same bytes in both")
    (only / "mine.txt").write_text("only in b")
    pinned = kc.submit(jobfns.read_tree, (kc.Data(str(shared)),), keep=True)
    assert pinned.result(timeout=60, cleanup=False) == {"common.txt": "the same bytes in both"}
    kc.submit(jobfns.read_tree, (kc.Data(str(only)),)).result(timeout=60)

    report = kc.collect_garbage(0, dry_run=False)
    assert report.data == [kc.Data(str(only)).content_hash()]
    assert len(report.blobs) == 1  # mine.txt; common.txt is the pinned job's too
    storage = open_storage(any_storage)
    assert storage.exists(layout.data_manifest(kc.Data(str(shared)).content_hash()))
    assert not storage.exists(layout.data_manifest(kc.Data(str(only)).content_hash()))
    # The removed data is uploaded again by the next submit that uses it.
    again = kc.submit(jobfns.read_tree, (kc.Data(str(only)),))
    assert again.result(timeout=60)["mine.txt"] == "only in b"


def test_a_keyed_submit_after_gc_starts_a_new_attempt(storage_uri: str) -> None:
    first = _collected(idempotency_key="nightly")
    assert kc.collect_garbage(0, dry_run=False).jobs == [first.job_id]
    second = kc.submit(jobfns.add, (1, 2), idempotency_key="nightly")
    assert second.attempt == 2 and second.job_id != first.job_id
    assert second.result(timeout=60) == 3


def _until(check: object, what: str) -> None:
    from kinetic_core.control.polling import poll_ticks

    for _ in poll_ticks(interval=0.2, timeout=60, describe=lambda: what):
        if check():  # type: ignore[operator]
            return


def test_a_batch_stays_while_any_child_stays(storage_uri: str) -> None:
    batch = kc.submit_map(jobfns.sleep, [(0, "quick"), (60, "slow")])
    try:
        _until(lambda: all(batch.jobs), "both children launched")
        quick = batch.jobs[0]
        assert quick is not None
        quick.wait(timeout=60)
        report = kc.collect_garbage(0, dry_run=False, include_uncollected=True)
        assert report.jobs == [] and report.batches == []
        assert report.kept["batch"] >= 1  # the quick child: ended, but its batch runs
        assert kc.attach(quick.job_id).state().status is kc.JobStatus.SUCCEEDED
    finally:
        batch.cancel()
    batch.wait(timeout=60)
    _until(lambda: all(h.state().terminal for h in kc.list_jobs()), "the driver to end")
    report = kc.collect_garbage(0, dry_run=False, include_uncollected=True)
    assert report.batches == [batch.group_id]
    assert not open_storage(storage_uri).walk(layout.batch_dir(batch.group_id))
    assert kc.list_jobs() == []


def test_cli_gc(storage_uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    handle = _collected()
    capsys.readouterr()
    assert cli_main(["gc", "--older-than", "30d", "--dry-run", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["jobs"] == [] and report["kept"] == {"recent": 1} and report["dry_run"]
    assert cli_main(["gc", "--older-than", "0s"]) == 0
    assert "Removed 1 job, 0 batches" in capsys.readouterr().out  # issue 35 item 9: "1 jobs"
    with pytest.raises(kc.JobNotFound):
        kc.attach(handle.job_id)
    assert cli_main(["gc", "--older-than", "soon"]) == 2
    assert "not an age" in capsys.readouterr().err


def test_bad_ages_say_what_is_accepted(storage_uri: str) -> None:
    for bad in (-1, "soon", object(), float("nan")):
        with pytest.raises(kc.ConfigError, match="older_than"):
            kc.collect_garbage(bad)


# ---- kill safety -------------------------------------------------------------------------------
_KILLED_GC = """
import os, signal, sys
from kinetic_core.storage.local import LocalStorage
import kinetic_core as kc

left = int(sys.argv[1])
for name in ("delete", "delete_prefix"):
    real = getattr(LocalStorage, name)
    def dying(self, key, _real=real):
        global left
        if left == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        left -= 1
        return _real(self, key)
    setattr(LocalStorage, name, dying)
kc.collect_garbage(0, dry_run=False)
"""


def _readers_work(uri: str) -> None:
    """Whatever a killed gc left, listing and attaching never crash, and a job that is
    listed still reads as the job it was (its outcome unchanged)."""
    for handle in kc.list_jobs():
        assert kc.attach(handle.job_id).state().status is kc.JobStatus.SUCCEEDED
    for job_id in open_storage(uri).list_names(layout.JOBS):
        try:
            assert kc.attach(job_id).state().status is kc.JobStatus.SUCCEEDED
        except kc.JobNotFound:
            pass


@pytest.mark.parametrize("deletions", [0, 1, 2, 3, 5, 8, 13])
def test_gc_killed_after_any_deletion_leaves_readers_working(
    storage_uri: str, tmp_path: Path, deletions: int
) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x.txt").write_text("x")
    handles = [_collected(), _collected(idempotency_key="k")]
    handles.append(kc.submit(jobfns.read_tree, (kc.Data(str(tmp_path / "d")),)))
    handles[-1].result(timeout=60)
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_GC, str(deletions)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL
    _readers_work(storage_uri)
    kc.collect_garbage(0, dry_run=False)  # the next run finishes the job
    assert open_storage(storage_uri).list_names(layout.JOBS) == []
    assert all(_gone(storage_uri, h) for h in handles)
    again = kc.submit(jobfns.add, (2, 2), idempotency_key="k")
    assert again.attempt == 2 and again.result(timeout=60) == 4


# ---- the data protocol against concurrent submitters ------------------------------------------
_SUBMITTER = """
import random, sys, time
import kinetic_core as kc
from tests.core import jobfns

folder, rounds = sys.argv[1], int(sys.argv[2])
expected = jobfns.read_tree(folder)
for _ in range(rounds):
    time.sleep(random.random() / 2)  # now and then no job uses the Data: gc may take it
    got = kc.submit(jobfns.read_tree, (kc.Data(folder),)).result(timeout=120)
    assert got == expected, (got, expected)
"""

_COLLECTOR = """
import os, sys
import kinetic_core as kc

stop, out = sys.argv[1], sys.argv[2]
removed = 0
while not os.path.exists(stop):
    removed += len(kc.collect_garbage(0, dry_run=False).blobs)
with open(out, "w") as fh:
    fh.write(str(removed))
"""


def _spawn(script: str, *argv: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *argv],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_concurrent_gc_never_takes_data_a_submit_relies_on(
    storage_uri: str, tmp_path: Path
) -> None:
    """Submitters reuse one Data (every submit after the first is a dedup hit on blobs gc
    keeps removing, as each job is collected and removed at once) while two gc processes
    run back to back: every job reads its whole Data."""
    folder = tmp_path / "shared"
    folder.mkdir()
    for i in range(24):
        (folder / f"part-{i:02d}.txt").write_text(f"part {i} " * (i + 1))
    stop = tmp_path / "stop"
    collectors = [_spawn(_COLLECTOR, str(stop), str(tmp_path / f"gc-{i}")) for i in range(2)]
    try:
        submitters = [_spawn(_SUBMITTER, str(folder), "12") for _ in range(2)]
        codes = [p.wait(timeout=600) for p in submitters]
    finally:
        stop.touch()
        for p in collectors:
            p.wait(timeout=300)
    assert codes == [0, 0]  # every job read its Data (a missing file fails its job)
    assert [p.returncode for p in collectors] == [0, 0]
    removed = sum(int((tmp_path / f"gc-{i}").read_text()) for i in range(2))
    assert removed > 0  # gc really removed the blobs the submitters kept reusing


def _stored_data(uri: str, tmp_path: Path, name: str) -> str:
    """A Data uploaded by a job that was collected (so nothing keeps it); its digest."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "f.txt").write_text(name)
    kc.submit(jobfns.read_tree, (kc.Data(str(folder)),)).result(timeout=60)
    return kc.Data(str(folder)).content_hash()


def test_an_upload_under_way_keeps_all_data_and_stale_leases_go(
    storage_uri: str, tmp_path: Path
) -> None:
    digest = _stored_data(storage_uri, tmp_path, "d")
    storage = open_storage(storage_uri)
    uploading = layout.data_lease("uploading")
    storage.write_bytes(uploading, json.dumps({"at": time.time(), "digests": None}).encode())
    report = kc.collect_garbage(0, dry_run=False)
    assert report.data == [] and "uploading" in report.data_note
    assert storage.exists(layout.data_manifest(digest))

    storage.write_bytes(uploading, json.dumps({"at": 0, "digests": None}).encode())  # expired
    report = kc.collect_garbage(0, dry_run=False)
    assert report.data == [digest] and not report.data_note
    assert not storage.exists(uploading) and not storage.exists(layout.data_manifest(digest))


def test_a_kept_job_of_an_older_version_keeps_all_data(storage_uri: str, tmp_path: Path) -> None:
    digest = _stored_data(storage_uri, tmp_path, "d")
    old = kc.submit(jobfns.add, (1, 2), keep=True)
    old.wait(timeout=60)
    storage = open_storage(storage_uri)
    record = json.loads(storage.read_bytes(layout.job_file(old.job_id, layout.HANDLE)))
    del record["keep"]  # as written before `keep` existed: its call may read any data
    storage.write_bytes(layout.job_file(old.job_id, layout.HANDLE), json.dumps(record).encode())
    report = kc.collect_garbage(0, dry_run=False)
    assert report.data == [] and old.job_id in report.data_note
    assert storage.exists(layout.data_manifest(digest))
