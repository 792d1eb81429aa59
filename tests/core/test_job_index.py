"""The job index (``kinetic_core/records/job_index.py``): the newest page costs a bounded number of
storage requests, whatever the history; no ghost and no miss after a kill between any two
writes; concurrent submitters all appear; older stores list everything and reindex once;
batches show as one row.

Histories are written with the project's own writers (``tests/core/index_helpers.py``),
real jobs where the submit path itself is under test."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import kinetic_core as kc
import kinetic_core.jobs.listing as listing
from kinetic_core.cli import main
from kinetic_core.jobs import handle as jobs
from kinetic_core.records import job_index, layout
from kinetic_core.storage import Storage, open_storage
from tests.cleanup import kill_leftovers
from tests.core import batch_helpers, jobfns
from tests.core.index_helpers import (
    START,
    CountingStorage,
    counting,
    write_history,
    write_job,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["file", "gs"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return f"file://{tmp_path / 'store'}"
    emulator = request.getfixturevalue("gcs_emulator")
    emulator.fail_next(0)
    return emulator.uri(f"index-{uuid.uuid4().hex[:12]}")


@pytest.fixture
def counted(store: str) -> Iterator[CountingStorage]:
    yield from counting(store)


@pytest.fixture
def resolves(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every ``resolve_states`` call listing makes, as the job ids it was given."""
    calls: list[list[str]] = []
    real = listing.resolve_states

    def recorded(handles: list[kc.JobHandle]) -> list[kc.JobState]:
        calls.append([h.job_id for h in handles])
        return real(handles)

    monkeypatch.setattr(listing, "resolve_states", recorded)
    return calls


def ids(uri: str, **filters: object) -> list[str]:
    return [h.job_id for h in kc.list_jobs(target={"storage": uri}, **filters)]  # type: ignore[arg-type]


def new_store(tmp_path: Path) -> tuple[str, Storage]:
    """A fresh store, listed once while empty: that listing marks its index complete."""
    uri = f"file://{tmp_path / 'store'}"
    assert ids(uri) == []
    storage = open_storage(uri)
    assert storage.exists(layout.INDEX_COMPLETE)
    return uri, storage


def entries(storage: Storage, job_id: str) -> list[str]:
    return [k for k in storage.walk(layout.INDEX_JOBS) if f"-{job_id}." in k]


# ---- cost ----------------------------------------------------------------------------------


def test_newest_page_costs_a_bounded_number_of_requests(
    store: str, counted: CountingStorage, resolves: list[list[str]]
) -> None:
    """1,200 jobs over 8 days (90 on the GCS emulator): a page of 20 is a few LISTs and
    20 handle reads, with or without filters; the old scan reads every handle."""
    count = 1200 if store.startswith("file://") else 90
    newest = write_history(counted.inner, count)
    counted.calls.clear()
    assert ids(store, limit=20) == newest[:20]
    assert counted.calls["read_bytes"] == 20
    # years, days and hours of the newest day, then the 4 hour buckets the page spans
    # (6 jobs an hour), one more day's hours if it crosses midnight
    assert counted.calls["list_names"] <= 9, counted.calls
    assert counted.total() <= 30, counted.calls

    counted.calls.clear()
    alice = [i for i in newest if int(i.rsplit("-", 1)[1]) % 2][:20]
    assert ids(store, owner="alice", limit=20) == alice
    assert counted.calls["read_bytes"] <= 41, counted.calls  # every other job is alice's

    counted.calls.clear()
    succeeded = [i for i in newest if int(i.rsplit("-", 1)[1]) % 3 == 0][:20]
    assert ids(store, statuses={"SUCCEEDED"}, limit=20) == succeeded
    assert counted.calls["read_bytes"] == 20  # ended jobs of other statuses: never read
    assert resolves == []  # ended jobs' statuses come from the index
    assert counted.total() <= 40, counted.calls

    counted.calls.clear()
    since = START + (count - 30) * 600 - 1
    assert ids(store, since=since, reverse=True, limit=5) == newest[:30][::-1][:5]
    assert counted.total() <= 14, counted.calls  # older buckets are never listed

    counted.calls.clear()
    scan = listing.Query.of(limit=20).scan(counted, None, None)
    assert [h.job_id for h in scan] == newest[:20]
    assert counted.calls["read_bytes"] == count  # the scan it replaces: one read per job


def test_status_filter_resolves_the_open_jobs_of_a_page_in_one_batch(
    tmp_path: Path, resolves: list[list[str]]
) -> None:
    """Jobs the index does not know ended are resolved together, a page at a time; the
    ends found are written to the index, so the next listing resolves nothing."""
    uri, storage = new_store(tmp_path)
    write_history(storage, 50)
    never_launched = [
        write_job(storage, f"open-{i:03d}", START + 10**6 + i).job_id for i in range(30)
    ][::-1]
    assert ids(uri, statuses={"FAILED"}, limit=20) == never_launched[:20]
    assert resolves == [never_launched[:20]]  # one batch, the page's open jobs only
    assert all(any(".end=failed" in k for k in entries(storage, i)) for i in never_launched[:20])
    resolves.clear()
    assert ids(uri, statuses={"FAILED"}, limit=20) == never_launched[:20]
    assert resolves == []


def test_superseded_attempt_is_resolved_not_read_from_its_end_entry(
    tmp_path: Path, resolves: list[list[str]]
) -> None:
    """Once a recovery starts attempt 2, attempt 1 reads as attempt 2: its FAILED end
    entry no longer settles its status, so a status filter resolves it."""
    uri, storage = new_store(tmp_path)
    first = write_job(storage, "attempt-one", START, status="FAILED")
    assert ids(uri, statuses={"FAILED"}) == [first.job_id] and resolves == []
    second = kc.JobHandle(
        job_id="attempt-two",
        storage=uri,
        target={},
        created_at=START + 60,
        recovered_from=first.job_id,
    )
    job_index.note_created(storage, second.record())  # what the recovery's create_attempt does
    assert any(k.endswith(".superseded.json") for k in entries(storage, first.job_id))
    assert ids(uri, statuses={"FAILED"}) == [first.job_id]
    assert resolves == [[first.job_id]]


# ---- ghosts, kills, races ------------------------------------------------------------------


def test_entry_without_its_job_is_never_listed_and_deleted_once_old(tmp_path: Path) -> None:
    uri, storage = new_store(tmp_path)
    real = write_job(storage, "real-job", START + 100, status="SUCCEEDED")
    for job_id, created_at in (("ghost-old", START + 200), ("ghost-young", time.time())):
        ghost = kc.JobHandle(job_id=job_id, storage=uri, target={}, created_at=created_at)
        job_index.note_created(storage, ghost.record())  # its submitter died right here
    assert ids(uri) == [real.job_id]
    assert ids(uri, statuses={"SUCCEEDED"}) == [real.job_id]
    assert entries(storage, "ghost-old") == []  # older than GHOST_GRACE: deleted
    assert len(entries(storage, "ghost-young")) == 1  # may be mid-submit: kept, not shown


def test_entry_a_racing_creator_left_with_another_time_is_dropped(tmp_path: Path) -> None:
    uri, storage = new_store(tmp_path)
    job = write_job(storage, "raced-job", START)
    loser = kc.JobHandle(job_id="raced-job", storage=uri, target={}, created_at=START + 5)
    job_index.note_created(storage, loser.record())
    assert ids(uri) == ["raced-job"]
    assert entries(storage, job.job_id) == [
        layout.index_entry(job.created_at, job.job_id).removeprefix(f"{layout.INDEX_JOBS}/")
    ]


KILL_AT = """
import os, signal, sys
sys.path.insert(0, {root!r})
from kinetic_core.storage.local import LocalStorage
real = LocalStorage.write_bytes
def write_bytes(self, key, data, *, create_only=False):
    if key.endswith({suffix!r}) or {marker!r} in key:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, key, data, create_only=create_only)
LocalStorage.write_bytes = write_bytes
{body}
"""


def run_killed(suffix: str, marker: str, body: str) -> None:
    script = KILL_AT.format(root=str(ROOT), suffix=suffix, marker=marker, body=body)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def test_submitter_killed_between_index_entry_and_handle(storage_uri: str) -> None:
    """A real SIGKILL after the entry, before ``handle.json``: no ghost is listed; the
    keyed retry creates the job, which is listed once (the dead one's entry is dropped)."""
    storage = open_storage(storage_uri)
    assert ids(storage_uri) == []  # marks the empty store's index complete
    run_killed(
        "/handle.json",
        "\0",
        "import kinetic_core as kc\nfrom tests.core import jobfns\n"
        "kc.submit(jobfns.add, (1, 2), idempotency_key='nightly-1')",
    )
    (orphan,) = storage.walk(layout.INDEX_JOBS)
    dead = orphan.rsplit("/", 1)[1][len("0000000000000-") : -len(".json")]
    assert not storage.exists(layout.job_file(dead, layout.HANDLE))
    assert ids(storage_uri) == []
    job = kc.submit(jobfns.add, (1, 2), idempotency_key="nightly-1")
    assert job.result(timeout=60) == 3
    assert ids(storage_uri) == [job.job_id]
    assert ids(storage_uri, statuses={"SUCCEEDED"}) == [job.job_id]
    assert [k for k in entries(storage, job.job_id) if ".end=" not in k] == [
        layout.index_entry(job.created_at, job.job_id).removeprefix(f"{layout.INDEX_JOBS}/")
    ]


def test_decider_killed_between_outcome_and_end_entry(storage_uri: str) -> None:
    """A real SIGKILL after ``outcome.json``, before the end entry: the job lists with
    its decided status (resolved from storage), and the listing writes the end entry."""
    storage = open_storage(storage_uri)
    assert ids(storage_uri) == []  # marks the empty store's index complete
    run_killed(
        "\0",
        ".end=",
        "from kinetic_core.records import lifecycle as records\nfrom kinetic_core.storage import open_storage\n"
        "from tests.core.index_helpers import write_job\n"
        f"s = open_storage({storage_uri!r})\n"
        "write_job(s, 'decided-job', 1764000000.0)\n"
        "records.decide(s, 'decided-job', 'SUCCEEDED', None, None, by='test')",
    )
    assert storage.exists(layout.job_file("decided-job", layout.OUTCOME))
    assert not any(".end=" in k for k in entries(storage, "decided-job"))
    assert ids(storage_uri, statuses={"SUCCEEDED"}) == ["decided-job"]
    assert ids(storage_uri, statuses={"FAILED", "RUNNING", "PENDING"}) == []
    assert any(k.endswith(".end=succeeded.json") for k in entries(storage, "decided-job"))


WRITER = """
import sys
sys.path.insert(0, {root!r})
from kinetic_core.storage import open_storage
from tests.core.index_helpers import write_job
s = open_storage({uri!r})
for i in range({count}):
    write_job(s, "p{p}-" + str(i).zfill(4), {start} + i * 7 + {p}, status="SUCCEEDED")
"""


def test_concurrent_submitters_in_threads_and_processes_all_appear(storage_uri: str) -> None:
    """Four processes and four threads write into the same buckets at once, and four real
    submits race them: every job is listed, newest first, and nothing else."""
    storage = open_storage(storage_uri)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WRITER.format(root=str(ROOT), uri=storage_uri, count=40, start=START, p=p),
            ]
        )
        for p in range(4)
    ]
    made: list[str] = []

    def thread_writer(t: int) -> None:
        for i in range(40):
            made.append(write_job(storage, f"t{t}-{i:04d}", START + i * 7 + 0.5 + t / 10).job_id)

    def real_submit() -> None:
        made.append(kc.submit(jobfns.add, (1, 1)).job_id)

    threads = [threading.Thread(target=thread_writer, args=(t,)) for t in range(4)]
    threads += [threading.Thread(target=real_submit) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    made += [f"p{p}-{i:04d}" for p in range(4) for i in range(40)]
    listed = kc.list_jobs()
    assert sorted(h.job_id for h in listed) == sorted(made) and len(made) == 324
    order = [(int(h.created_at * 1000), h.job_id) for h in listed]  # ms, then id: the index's
    assert order == sorted(order, reverse=True)
    assert [h.job_id for h in kc.list_jobs(limit=20)] == [h.job_id for h in listed[:20]]
    assert storage.exists(layout.INDEX_COMPLETE)


def test_jobs_of_one_millisecond_list_in_one_order_scanned_or_indexed(storage_uri: str) -> None:
    """The scan (a store not yet marked indexed) sorted by the float creation time, the
    index by milliseconds then id: two submits in one millisecond swapped places."""
    storage = open_storage(storage_uri)
    at = START + 0.0004
    write_job(storage, "job-b", at)  # the later of the two, the smaller id
    write_job(storage, "job-z", at - 0.0003)  # the same millisecond
    scanned = [h.job_id for h in kc.list_jobs()]  # no index/complete.json yet: a scan
    assert storage.exists(layout.INDEX_COMPLETE)  # that scan marked the index complete
    indexed = [h.job_id for h in kc.list_jobs()]
    assert scanned == indexed == ["job-z", "job-b"]


# ---- older stores ----------------------------------------------------------------------------


def test_store_without_index_lists_everything_and_reindex_builds_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = f"file://{tmp_path / 'store'}"
    storage = open_storage(uri)
    old = write_history(storage, 60, indexed=False)  # written by an older version
    assert ids(uri) == old
    new = write_job(storage, "new-job", START + 10**6)  # a new submitter into the old store
    assert not storage.exists(layout.INDEX_COMPLETE)  # entries of the old jobs are missing
    assert ids(uri) == [new.job_id, *old]
    before = ids(uri, statuses={"SUCCEEDED", "CANCELLED"})
    assert before == [i for i in old if int(i.rsplit("-", 1)[1]) % 3 != 1]

    assert main(["--storage", uri, "jobs", "reindex"]) == 0
    assert "61 jobs; wrote 60 index entries and 60 end entries" in capsys.readouterr().out
    assert storage.exists(layout.INDEX_COMPLETE)
    assert ids(uri) == [new.job_id, *old]
    assert ids(uri, statuses={"SUCCEEDED", "CANCELLED"}) == before
    again = kc.repair_index(target={"storage": uri})
    assert (again.jobs, again.created, again.ended) == (61, 0, 0)
    wrapped = counting(uri)
    with_counts = next(wrapped)
    assert ids(uri, limit=5) == [new.job_id, *old[:4]]
    assert with_counts.calls["read_bytes"] == 5 and with_counts.total() <= 12
    wrapped.close()


# ---- batches -------------------------------------------------------------------------------


def test_batch_shows_as_one_row_with_its_driver_and_children_under_all(
    storage_uri: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    lone = kc.submit(jobfns.add, (2, 2), name="lone")
    batch = kc.submit_map(batch_helpers.square_or_fail, [1, 2, 3], name="squares")
    batch.wait(timeout=120)
    assert lone.result(timeout=60) == 4
    every = kc.list_jobs()
    drivers = [h for h in every if "kinetic/batch-driver" in h.tags]
    children = [h for h in every if h.group_id == batch.group_id]
    assert len(children) == 3 and len(drivers) == 1
    assert {kc.batch_of(h) for h in [*children, *drivers]} == {batch.group_id}
    assert kc.batch_of(lone) is None
    grouped = kc.list_jobs(include_batch_children=False)
    assert len(grouped) == 2 and lone.job_id in [h.job_id for h in grouped]
    assert [kc.batch_of(h) for h in grouped].count(batch.group_id) == 1
    assert len(kc.list_jobs(include_batch_children=False, limit=1)) == 1

    capsys.readouterr()
    assert main(["jobs", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    # Issue 35 item 9: batches came as {"batch": ...} objects among the jobs (`jq
    # '.[].job_id'` broke); --json lists jobs only, batch children and drivers included.
    assert all(set(r) >= {"job_id", "state"} for r in rows), rows
    assert {r["job_id"] for r in rows} == {h.job_id for h in every}
    assert main(["batch", "list", "--json"]) == 0
    (summary,) = json.loads(capsys.readouterr().out)
    assert summary["group_id"] == batch.group_id and summary["total"] == 3
    assert main(["jobs", "list"]) == 0
    table = capsys.readouterr().out
    # Issue 35 item 9: "1 jobs", "1 batches".
    titles = [line.strip() for line in table.splitlines()]
    assert "1 job" in titles and "1 batch" in titles and batch.group_id in table
    assert children[0].job_id not in table
    assert main(["jobs", "list", "--all", "--json"]) == 0
    listed = {r["job_id"] for r in json.loads(capsys.readouterr().out)}
    assert listed == {h.job_id for h in every}
    assert job_index.GROUP_TAGS[0] == jobs.BATCH_GROUP_TAG
    kill_leftovers(Path(storage_uri[len("file://") :]))


def test_submit_and_end_write_the_entries(storage_uri: str) -> None:
    storage = open_storage(storage_uri)
    job = kc.submit(jobfns.add, (1, 1))
    assert job.result(timeout=60) == 2
    names = sorted(k.rsplit("/", 1)[1] for k in entries(storage, job.job_id))
    stem = layout.index_entry(job.created_at, job.job_id).rsplit("/", 1)[1][: -len(".json")]
    assert names == [f"{stem}.end=succeeded.json", f"{stem}.json"]
    assert not storage.exists(layout.INDEX_COMPLETE)  # a submit never lists jobs/
    assert ids(storage_uri) == [job.job_id]  # the first listing scans, finds all indexed
    assert os.path.exists(storage_uri[len("file://") :] + "/" + layout.INDEX_COMPLETE)
