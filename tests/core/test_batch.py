"""Batches on real components: detached local processes, real files, real signals.

Children block on gate files where a test needs a batch to be "still submitting" or
"still running", so no assertion depends on timing; every wait is bounded and says
what it was waiting for.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import kinetic_core as kc
from kinetic_core.backends import get_backend
from kinetic_core.batch import driver as driver_module
from kinetic_core.batch import entry
from kinetic_core.batch.driver import drive_batch
from kinetic_core.batch.manifest import BatchRecords, child_job_id, read_manifest
from kinetic_core.records.envelope import read_summary
from kinetic_core.storage import open_storage
from tests.cleanup import kill_leftovers
from tests.core import batch_helpers as h

ROOT = Path(__file__).resolve().parents[2]
os.environ.setdefault("KINETIC_KILL_GRACE", "2")  # cancelled children die quickly
BAD = {i for i in range(200) if i % 10 == 7}  # the inputs square_or_fail rejects


# ---- fixtures and helpers -------------------------------------------------------------------


@dataclass
class Store:
    """A fresh file:// storage root and what the tests read back from it."""

    root: Path

    @property
    def uri(self) -> str:
        return f"file://{self.root}"

    @property
    def target(self) -> kc.Target:
        return kc.Target(storage=self.uri)

    def path(self, name: str) -> str:
        return str(self.root.parent / name)

    def job_ids(self) -> list[str]:
        """Launched child jobs (a handle exists); the batches' driver jobs left out."""
        jobs = self.root / "jobs"
        return sorted(
            p.name
            for p in (jobs.iterdir() if jobs.exists() else [])
            if (p / "handle.json").exists()
            and "kinetic/batch-driver" not in json.loads((p / "handle.json").read_text())["tags"]
        )

    def batch_dir(self, group_id: str) -> Path:
        return self.root / "batches" / group_id

    def records(self, group_id: str) -> dict[int, dict[str, Any]]:
        """Per input: launched attempts (from the launch ledger) and any staging error."""
        out: dict[int, dict[str, Any]] = {}
        ledger = self.batch_dir(group_id) / "launches"
        tickets = []
        for p in ledger.glob("*.json") if ledger.exists() else []:
            try:
                tickets.append((int(p.stem), json.loads(p.read_text())))
            except ValueError:
                continue  # being written right now
        for _, t in sorted(tickets):
            rec = out.setdefault(t["index"], {"index": t["index"], "attempts": [], "error": None})
            rec["attempts"].append(child_job_id(group_id, t["index"], t["attempt"]))
        children = self.batch_dir(group_id) / "children"
        for p in children.glob("*.json") if children.exists() else []:
            data = json.loads(p.read_text())
            out.setdefault(data["index"], data)["error"] = data["error"]
        return out

    def handle(self, job_id: str) -> dict[str, Any]:
        return json.loads((self.root / "jobs" / job_id / "handle.json").read_text())


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    monkeypatch.delenv("KINETIC_SIGNING_KEY", raising=False)
    monkeypatch.delenv("KINETIC_BACKEND", raising=False)
    s = Store(tmp_path / "store")
    yield s
    kill_leftovers(s.root)


@pytest.fixture
def spawn() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start helper Python processes; any still alive at teardown are killed."""
    procs: list[subprocess.Popen[str]] = []

    def start(script: str, *args: str) -> subprocess.Popen[str]:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(
            [sys.executable, "-c", script, *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


class Lines:
    """Reads a process's stdout in a thread so that every read can be bounded."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.queue.put(line)
        self.queue.put(None)

    def next_json(self, timeout: float, what: str) -> dict[str, Any]:
        try:
            line = self.queue.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no output from the helper process within {timeout}s ({what})")
        if line is None:
            stderr = self.proc.stderr.read() if self.proc.stderr else ""
            pytest.fail(f"the helper process ended before {what}; stderr:\n{stderr}")
        return json.loads(line)

    def rest(self, timeout: float, what: str) -> list[dict[str, Any]]:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the helper process did not finish within {timeout}s ({what})")
        out = []
        while (line := self.queue.get(timeout=10)) is not None:
            out.append(json.loads(line))
        return out


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def index_of(job: kc.JobHandle) -> int:
    return int(job.tags["kinetic/index"])


def open_gate(path: str) -> None:
    Path(path).touch()


def max_in_flight(store: Store, group_id: str) -> int:
    """The most children in flight when one was launched, from the stored records."""
    spans = []
    for rec in store.records(group_id).values():
        for job_id in rec["attempts"]:
            outcome = json.loads((store.root / "jobs" / job_id / "outcome.json").read_text())
            spans.append((store.handle(job_id)["created_at"], outcome["at"]))
    return max(sum(1 for c, f in spans if c <= start < f) for start, _ in spans)


# ---- one 200-input batch, shared by the assertions that only read it ----------------------------


@dataclass
class Big:
    store: Store
    batch: kc.BatchHandle
    first: list[Any]  # results(return_exceptions=True, cleanup=False) while it ran


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Big]:
    s = Store(tmp_path_factory.mktemp("big") / "store")
    batch = kc.submit_map(h.square_or_fail, range(200), target=s.target, max_concurrency=16)
    try:
        first = batch.results(return_exceptions=True, cleanup=False, timeout=240)
        yield Big(s, batch, first)
    finally:
        kill_leftovers(s.root)


def expected_value(i: int) -> Any:
    return None if i in BAD else i * i


def test_big_batch_ordered_results_with_exceptions_in_place(big: Big) -> None:
    for values in (big.first, big.batch.results(return_exceptions=True, cleanup=False)):
        assert len(values) == 200
        for i, value in enumerate(values):
            if i in BAD:
                assert isinstance(value, ValueError), (i, value)
                assert f"input {i} is bad" in str(value)
            else:
                assert value == i * i, (i, value)


def test_big_batch_completion_order_is_a_permutation(big: Big) -> None:
    unordered = big.batch.results(ordered=False, return_exceptions=True, cleanup=False)
    ordered = big.batch.results(ordered=True, return_exceptions=True, cleanup=False)

    def key(v: Any) -> str:
        return repr(v) if isinstance(v, Exception) else f"value {v}"

    assert sorted(map(key, unordered)) == sorted(map(key, ordered))


def test_big_batch_error_carries_partial_results(big: Big) -> None:
    for batch in (big.batch, kc.attach_batch(big.batch.group_id, target=big.store.target)):
        with pytest.raises(kc.BatchError) as info:
            batch.results(cleanup=False, timeout=60)
        err = info.value
        assert err.group_id == big.batch.group_id
        assert str(err) == f"Batch {big.batch.group_id}: 20 of 200 jobs failed"
        assert sorted(index_of(j) for j in err.failures) == sorted(BAD)
        assert all(isinstance(j, kc.JobHandle) for j in err.failures)
        assert {j.status() for j in err.failures} == {kc.JobStatus.FAILED}
        assert err.partial_results == [expected_value(i) for i in range(200)]
        assert err.submission_failures == {}


def test_big_batch_statuses_failures_and_jobs(big: Big) -> None:
    batch = big.batch
    assert batch.status_counts() == {"SUCCEEDED": 180, "FAILED": 20}
    statuses = batch.statuses()
    assert [i for i, s in enumerate(statuses) if s == "FAILED"] == sorted(BAD)
    assert batch.wait(timeout=60) == statuses
    assert sorted(index_of(j) for j in batch.failures()) == sorted(BAD)
    jobs = batch.jobs
    assert len(jobs) == 200 and all(j is not None for j in jobs)
    assert [index_of(j) for j in jobs if j] == list(range(200))
    assert len({j.job_id for j in jobs if j}) == 200
    assert batch.submission_failures == {}
    assert batch.submission_complete and not batch.cancel_requested


def test_big_batch_manifest_layout_is_linear(big: Big) -> None:
    group = big.store.batch_dir(big.batch.group_id)
    manifest_path = group / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    assert manifest["group_id"] == big.batch.group_id
    assert manifest["total_expected"] == 200 and manifest["retries"] == 0
    assert manifest["max_concurrency"] == 16 and manifest["name"] == "square_or_fail"
    assert (group / "state" / "submission_complete").exists()

    tickets = sorted((group / "launches").iterdir())
    assert sorted(p.name for p in tickets) == sorted(f"{i}.json" for i in range(200))
    assert not (group / "children").exists()  # only inputs that could not be staged get one
    records = big.store.records(big.batch.group_id)
    assert all(len(r["attempts"]) == 1 and r["error"] is None for r in records.values())
    jobs = big.batch.jobs
    assert [records[i]["attempts"][0] for i in range(200)] == [j.job_id for j in jobs if j]

    # The header was written before the first child was launched.
    assert manifest_path.stat().st_mtime <= min(p.stat().st_mtime for p in tickets)
    assert manifest["created_at"] <= min(j.created_at for j in jobs if j)
    # Bookkeeping is one small ticket per launch: nothing grows with the batch.
    assert manifest_path.stat().st_size < 8192
    assert max(p.stat().st_size for p in tickets) < 512


def test_bulk_status_is_one_backend_poll_per_call(
    big: Big, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = get_backend(kc.Target(storage=big.store.uri).resolve())
    calls: list[list[str]] = []
    real_poll = backend.poll

    def counting_poll(job_ids: list[str]) -> Any:
        calls.append(list(job_ids))
        return real_poll(job_ids)

    monkeypatch.setattr(backend, "poll", counting_poll)
    attached = kc.attach_batch(big.batch.group_id, target=big.store.target)
    for batch in (big.batch, attached, big.batch):
        calls.clear()
        assert batch.status_counts() == {"SUCCEEDED": 180, "FAILED": 20}
        assert len(calls) == 1, f"status_counts() polled the backend {len(calls)} times"
        assert sorted(calls[0]) == sorted(j.job_id for j in batch.jobs if j)
    calls.clear()
    assert len(attached.failures()) == 20
    assert len(calls) == 1


# ---- input modes ----------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_run_async_map_input_modes_name_and_tags(store: Store) -> None:
    train = kc.run(h.describe, target=store.target)
    batch = train.run_async_map(
        [{"lr": 0.1}, {"lr": 0.2}, (3, 0.5), 7, [8, 9]],
        max_concurrency=8,
        retries=1,
        name="sweep",
        tags={"night": "2026-11-21"},
    )
    assert batch.manifest["name"] == "sweep"
    assert batch.manifest["tags"] == {"night": "2026-11-21"}
    assert batch.results(timeout=90) == [
        {"args": [], "kwargs": {"lr": 0.1}},
        {"args": [], "kwargs": {"lr": 0.2}},
        {"args": [3, 0.5], "kwargs": {}},
        {"args": [7], "kwargs": {}},
        {"args": [8, 9], "kwargs": {}},
    ]
    for i, job in enumerate(batch.jobs):
        assert job is not None and job.name == "sweep"
        assert job.tags["night"] == "2026-11-21"
        assert job.tags["kinetic/group-id"] == batch.group_id and index_of(job) == i


@pytest.mark.timeout(120)
def test_explicit_input_modes(store: Store) -> None:
    single = kc.submit_map(
        h.describe, [{"not an identifier": 1}, (1, 2)], target=store.target, input_mode="single"
    )
    args = kc.submit_map(h.describe, [(1, 2), [3]], target=store.target, input_mode="args")
    kwargs = kc.submit_map(h.describe, [{"a": 1}], target=store.target, input_mode="kwargs")
    assert single.results(timeout=90) == [
        {"args": [{"not an identifier": 1}], "kwargs": {}},
        {"args": [(1, 2)], "kwargs": {}},
    ]
    assert args.results(timeout=90) == [{"args": [1, 2], "kwargs": {}}, {"args": [3], "kwargs": {}}]
    assert kwargs.results(timeout=90) == [{"args": [], "kwargs": {"a": 1}}]


# ---- streaming and ordering -----------------------------------------------------------------


@pytest.mark.timeout(120)
def test_as_completed_streams_while_later_inputs_are_still_being_submitted(store: Store) -> None:
    gate = store.path("gate")
    slots = store.path("slots")
    os.mkdir(slots)
    inputs = [{"value": 0, "slots": slots}] + [
        {"value": i, "gate": gate, "slots": slots} for i in (1, 2, 3)
    ]
    batch = kc.submit_map(h.gated, inputs, target=store.target, max_concurrency=2)
    seen = []
    for job in batch.as_completed(timeout=90):
        seen.append(index_of(job))
        if len(seen) == 1:
            # Children 1 and 2 hold both slots until the gate opens: 3 cannot be launched yet
            # (its call is staged: the batch is registered).
            assert seen == [0]
            assert batch.submission_complete
            assert batch.statuses()[3] == "UNSUBMITTED"
            assert batch.jobs[3] is None
            wait_until(lambda: len(os.listdir(slots)) == 2, 60, "children 1 and 2 running")
            open_gate(gate)
    assert sorted(seen) == [0, 1, 2, 3]
    assert batch.submission_complete
    # Child 0 finished at once and freed its slot, yet no child ever ran beside two others,
    # and none was launched while two others were in flight (from the stored records: a
    # child is in flight from its handle's creation until its outcome was decided).
    running = [int(Path(f"{slots}.seen-{i}").read_text()) for i in range(4)]
    assert max(running) == 2, f"children running at each start: {running}"
    assert max_in_flight(store, batch.group_id) == 2


@pytest.mark.timeout(120)
def test_results_in_completion_order(store: Store) -> None:
    gate = store.path("gate")
    inputs = [{"value": 0, "gate": gate}] + [{"value": i} for i in (1, 2, 3)]
    batch = kc.submit_map(h.gated, inputs, target=store.target, max_concurrency=4)

    def open_after_others_collected() -> None:
        # Child 0 may finish only after results() has collected 1, 2 and 3.
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            records = store.records(batch.group_id)
            if all(
                i in records
                and (store.root / "jobs" / records[i]["attempts"][-1] / "collected.json").exists()
                for i in (1, 2, 3)
            ):
                break
            time.sleep(0.05)
        open_gate(gate)

    opener = threading.Thread(target=open_after_others_collected, daemon=True)
    opener.start()
    values = batch.results(ordered=False, cleanup=False, timeout=90)
    opener.join(5)
    assert values[-1] == 0, f"child 0 finished last but results(ordered=False) gave {values}"
    assert sorted(values) == [0, 1, 2, 3]
    assert batch.results(ordered=True, cleanup=False, timeout=30) == [0, 1, 2, 3]


# ---- retries ---------------------------------------------------------------------------------


def flaky_inputs(store: Store, n: int, always: set[int]) -> list[dict[str, Any]]:
    markers = store.root.parent / "markers"
    markers.mkdir(exist_ok=True)
    return [{"value": i, "marker_dir": str(markers), "always": i in always} for i in range(n)]


@pytest.mark.timeout(150)
def test_retries_resubmit_failed_children_as_new_attempts(store: Store) -> None:
    batch = kc.submit_map(
        h.flaky,
        flaky_inputs(store, 3, always={2}),
        target=store.target,
        retries=1,
        max_concurrency=3,
    )
    values = batch.results(return_exceptions=True, cleanup=False, timeout=120)
    assert values[:2] == [0, 1]
    assert isinstance(values[2], RuntimeError) and "2 always fails" in str(values[2])

    records = store.records(batch.group_id)
    for i in range(3):
        attempts = records[i]["attempts"]
        assert len(attempts) == 2, f"child {i} should keep both attempts, has {attempts}"
        first, second = (kc.attach(a, target=store.target) for a in attempts)
        assert (first.attempt, second.attempt) == (1, 2)
        assert first.status() is kc.JobStatus.FAILED
        assert second.status() is (kc.JobStatus.FAILED if i == 2 else kc.JobStatus.SUCCEEDED)
    assert len(store.job_ids()) == 6
    assert [j.attempt for j in batch.jobs if j] == [2, 2, 2]
    assert batch.statuses() == ["SUCCEEDED", "SUCCEEDED", "FAILED"]
    assert [index_of(j) for j in batch.failures()] == [2]
    attached = kc.attach_batch(batch.group_id, target=store.target)
    assert [j.job_id for j in attached.jobs if j] == [records[i]["attempts"][1] for i in range(3)]
    assert attached.statuses() == ["SUCCEEDED", "SUCCEEDED", "FAILED"]


@pytest.mark.timeout(150)
def test_second_waiter_does_not_exceed_retries(store: Store) -> None:
    """Two processes wait on one batch (e.g. the submitter and `kinetic batch results`):
    each failed attempt is retried once, not once per waiter."""
    batch = kc.submit_map(
        h.flaky, flaky_inputs(store, 1, always={0}), target=store.target, retries=1
    )
    batch.wait_submitted(60)
    other = kc.attach_batch(batch.group_id, target=store.target, poll_timeout=90)
    assert len(other.statuses()) == 1  # the other waiter has read the child's first attempt
    assert batch.wait(timeout=90) == ["FAILED"]
    assert len(store.records(batch.group_id)[0]["attempts"]) == 2
    assert other.wait(timeout=90) == ["FAILED"]
    assert len(store.job_ids()) == 2, (
        f"retries=1 allows 2 attempts; jobs in storage: {store.job_ids()}"
    )
    attempts = store.records(batch.group_id)[0]["attempts"]
    assert [store.handle(a)["attempt"] for a in attempts] == [1, 2], (
        f"the record lost an attempt: {attempts}"
    )
    assert other.jobs[0] is not None and other.jobs[0].attempt == 2


@pytest.mark.timeout(150)
def test_retries_of_a_signed_batch_stay_signed(store: Store) -> None:
    target = kc.Target(storage=store.uri, signing_key="batch-secret")
    batch = kc.submit_map(h.flaky, flaky_inputs(store, 1, always=set()), target=target, retries=1)
    assert batch.results(cleanup=False, timeout=120) == [0]
    attempts = store.records(batch.group_id)[0]["attempts"]
    assert len(attempts) == 2
    storage = open_storage(store.uri)
    for job_id in attempts:
        call = read_summary(storage, f"jobs/{job_id}/payload.pkl")
        assert call["hmac"], f"attempt {job_id} was submitted unsigned"
    # Another process that holds the key can collect the retried attempt.
    assert kc.attach_batch(batch.group_id, target=target).results(cleanup=False, timeout=60) == [0]


@pytest.mark.timeout(120)
def test_a_forged_manifest_of_a_signed_batch_is_refused(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driver launches children from the manifest (their import path and folder): with
    a signing key, an edited manifest is refused before anything acts on it."""
    target = kc.Target(storage=store.uri, signing_key="batch-secret")
    batch = kc.submit_map(h.square_or_fail, [1, 2], target=target)
    assert batch.results(cleanup=False, timeout=90) == [1, 4]
    path = store.batch_dir(batch.group_id) / "manifest.json"
    manifest = json.loads(path.read_text())
    assert manifest["hmac"]
    manifest["python_path"] = ["/tmp/attacker"]
    path.write_text(json.dumps(manifest))
    with pytest.raises(kc.CorruptRecord, match="invalid signature"):
        kc.attach_batch(batch.group_id, target=target)
    with monkeypatch.context() as m:  # the detached driver's entry point, its key in its env
        m.setenv("KINETIC_SIGNING_KEY", "batch-secret")
        with pytest.raises(kc.CorruptRecord):
            drive_batch(batch.group_id, store.uri)
    del manifest["hmac"]
    path.write_text(json.dumps(manifest))
    with pytest.raises(kc.CorruptRecord, match="unsigned"):
        kc.attach_batch(batch.group_id, target=target)
    assert kc.attach_batch(batch.group_id, target=kc.Target(storage=store.uri)).total == 2


# ---- submission failures, cleanup -----------------------------------------------------------


@pytest.mark.timeout(120)
def test_submission_failure_is_recorded_and_reported(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(h.Picky, "broken", True)
    inputs = [(0,), (h.Picky(1),), (2,)]
    batch = kc.submit_map(h.fail_while, inputs, target=store.target, max_concurrency=2)
    batch.wait_submitted(60)
    assert batch.submission_complete
    assert batch.jobs[1] is None
    assert list(batch.submission_failures) == [1]
    assert isinstance(batch.submission_failures[1], kc.SubmissionError)
    record = store.records(batch.group_id)[1]
    assert (
        record["attempts"] == [] and "Picky inputs cannot be pickled" in record["error"]["message"]
    )
    values = batch.results(return_exceptions=True, cleanup=False, timeout=90)
    assert values[0] == 0 and values[2] == 2 and isinstance(values[1], kc.SubmissionError)
    assert len(store.job_ids()) == 2  # nothing half-written for the failed child
    assert not (store.root / "jobs" / child_job_id(batch.group_id, 1, 1)).exists()

    # Another process tells "failed to submit" apart and finishes on its own.
    attached = kc.attach_batch(batch.group_id, target=store.target, poll_timeout=90)
    assert attached.statuses() == ["SUCCEEDED", "SUBMIT_FAILED", "SUCCEEDED"]
    assert attached.status_counts() == {"SUCCEEDED": 2, "SUBMIT_FAILED": 1}
    with pytest.raises(kc.BatchError) as info:
        attached.results(cleanup=False)
    err = info.value
    assert str(err) == f"Batch {batch.group_id}: 1 of 3 inputs gave no value: 1 not submitted"
    assert err.failures == [] and list(err.submission_failures) == [1]
    assert "Picky inputs cannot be pickled" in str(err.submission_failures[1])
    assert err.partial_results == [0, None, 2]


@pytest.mark.timeout(120)
def test_failures_stay_correct_after_cleanup(store: Store) -> None:
    batch = kc.submit_map(h.square_or_fail, [1, 7, 3, 17], target=store.target)
    with pytest.raises(kc.BatchError) as info:
        batch.results(timeout=90)  # cleanup=True: succeeded children are cleaned up
    assert info.value.partial_results == [1, None, 9, None]
    jobs = [j for j in batch.jobs if j]
    for job in (jobs[0], jobs[2]):
        assert not (store.root / "jobs" / job.job_id / "result.pkl").exists()
    for b in (batch, kc.attach_batch(batch.group_id, target=store.target)):
        assert sorted(index_of(j) for j in b.failures()) == [1, 3]
        assert b.statuses() == ["SUCCEEDED", "FAILED", "SUCCEEDED", "FAILED"]

    batch.cleanup(backend=True, storage=True)
    for job in jobs:
        assert not (store.root / "backend-local" / job.job_id).exists()
        assert not (store.root / "jobs" / job.job_id / "payload.pkl").exists()
    assert sorted(index_of(j) for j in batch.failures()) == [1, 3]
    assert batch.status_counts() == {"SUCCEEDED": 2, "FAILED": 2}


# ---- another process: attach, kill, cancel --------------------------------------------------


@pytest.mark.timeout(180)
def test_attach_from_another_process_while_submitting(store: Store, spawn: Any) -> None:
    gate = store.path("gate")
    batch = kc.submit_map(
        h.gated, [(i, gate, 0.5) for i in range(16)], target=store.target, max_concurrency=4
    )
    # Four gated children hold every slot: the submitter is stuck until the gate opens.
    wait_until(lambda: len(store.records(batch.group_id)) == 4, 60, "the first 4 children")
    lines = Lines(spawn(h.ATTACHER, store.uri, batch.group_id))
    first = lines.next_json(90, "its first observation")
    assert first == {"submitted": 4, "unsubmitted": 12, "submit_failed": 0, "first": True}
    open_gate(gate)

    rest = lines.rest(150, "the attached batch to finish on its own")
    assert lines.proc.returncode == 0, lines.proc.stderr.read() if lines.proc.stderr else ""
    final = rest.pop()
    assert final == {"final": ["SUCCEEDED"] * 16, "complete": True}
    submitted = [first["submitted"]] + [r["submitted"] for r in rest]
    assert submitted == sorted(submitted), f"submitted counts went down: {submitted}"
    assert submitted[-1] == 16
    assert sorted(r["done"] for r in rest) == list(range(16))
    assert all(r["submit_failed"] == 0 for r in rest)
    assert batch.results(timeout=60) == list(range(16))


def wait_statuses(batch: kc.BatchHandle, timeout: float) -> list[str]:
    """Watch without driving: ``statuses()`` reads; it never launches a child."""

    def final() -> list[str] | None:
        statuses = batch.statuses()
        return statuses if all(s.terminal for s in statuses) else None

    return wait_until(final, timeout, "every child final")


def ledger(store: Store, group_id: str) -> list[dict[str, Any]]:
    folder = store.batch_dir(group_id) / "launches"
    return [json.loads(p.read_text()) for p in sorted(folder.iterdir(), key=lambda p: int(p.stem))]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("end", ["exits", "sigkilled"])
def test_batch_runs_to_the_end_after_its_submitter_is_gone(
    store: Store, spawn: Any, end: str
) -> None:
    """submit_map returns once the calls are staged; the submitter exits (or is killed
    at once) and the detached driver runs every child, max_concurrency respected."""
    slots = store.path("slots")
    os.mkdir(slots)
    spec = {"fn": "slotted", "inputs": [[i, slots, 0.3] for i in range(10)], "max_concurrency": 3}
    proc = spawn(
        h.SUBMIT_AND_EXIT, store.uri, json.dumps(spec), "linger" if end == "sigkilled" else ""
    )
    group_id = Lines(proc).next_json(60, "the group id")["group_id"]
    if end == "sigkilled":
        proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    assert store.batch_dir(group_id).joinpath("state", "submission_complete").exists()

    batch = kc.attach_batch(group_id, target=store.target, poll_timeout=120)
    assert wait_statuses(batch, 120) == ["SUCCEEDED"] * 10
    assert sorted(v for v, _ in h.runs(slots)) == list(range(10)), "each child ran once"
    assert h.most_seen(slots) <= 3, "max_concurrency was exceeded"
    assert len(ledger(store, group_id)) == 10
    assert batch.results(cleanup=False, timeout=30) == list(range(10))


@pytest.mark.timeout(180)
def test_two_drivers_racing_launch_each_child_once(store: Store, spawn: Any) -> None:
    """Besides the detached driver, two more drivers started on purpose for one batch:
    each child runs once and never more than max_concurrency together."""
    slots = store.path("slots")
    os.mkdir(slots)
    batch = kc.submit_map(
        h.slotted, [(i, slots, 0.2) for i in range(16)], target=store.target, max_concurrency=2
    )
    drivers = [spawn(h.DRIVER, store.uri, batch.group_id) for _ in range(2)]
    for proc in drivers:
        assert proc.wait(150) == 0, proc.stderr.read() if proc.stderr else ""
    assert wait_statuses(batch, 60) == ["SUCCEEDED"] * 16
    assert sorted(v for v, _ in h.runs(slots)) == list(range(16)), "a child ran twice"
    assert h.most_seen(slots) <= 2, "max_concurrency was exceeded"
    tickets = ledger(store, batch.group_id)
    assert sorted(t["index"] for t in tickets) == list(range(16))


@pytest.mark.timeout(120)
def test_a_ticket_whose_launcher_died_is_launched_by_another_driver(store: Store) -> None:
    """A driver took a ticket and died before launching it: the next step launches it."""
    gate = store.path("gate")
    slots = store.path("slots")
    os.mkdir(slots)
    batch = kc.submit_map(
        h.gated,
        [{"value": 0, "gate": gate, "slots": slots}, {"value": 1, "slots": slots}],
        target=store.target,
        max_concurrency=1,
    )
    running_children(store, batch.group_id, 1)  # child 0 holds the only slot
    dead = {"index": 1, "attempt": 1, "at": time.time(), "by": "gone:1"}
    (store.batch_dir(batch.group_id) / "launches" / "1.json").write_text(json.dumps(dead))
    open_gate(gate)
    assert batch.results(cleanup=False, timeout=90) == [0, 1]
    assert [t["index"] for t in ledger(store, batch.group_id)] == [0, 1]
    assert len(store.job_ids()) == 2


class _Killed(BaseException):
    """A driver killed in the middle of a step's launches (what SIGKILL leaves behind)."""


@pytest.mark.timeout(120)
def test_a_driver_killed_among_its_concurrent_launches_leaves_each_child_once(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step takes its tickets in sequence, then launches them together: a driver killed
    among those launches leaves tickets launched and tickets not; the next driver's steps
    launch the rest, and each child runs once, as attempt 1 (issue 37)."""
    monkeypatch.setattr(entry, "start_driver", lambda *_: None)  # this test drives it
    slots = store.path("slots")
    os.mkdir(slots)
    batch = kc.submit_map(
        h.slotted, [(i, slots, 0.1) for i in range(6)], target=store.target, max_concurrency=6
    )
    launch = driver_module.launch_staged
    calls: list[str] = []

    def dies_after_two(handle: Any, **kw: Any) -> None:
        calls.append(handle.job_id)
        if len(calls) > 2:
            raise _Killed
        launch(handle, **kw)

    first = driver_module.Driver(
        BatchRecords(read_manifest(open_storage(store.uri), batch.group_id), None)
    )
    monkeypatch.setattr(driver_module, "launch_staged", dies_after_two)
    with pytest.raises(_Killed):
        first.step()
    monkeypatch.setattr(driver_module, "launch_staged", launch)
    assert len(ledger(store, batch.group_id)) == 6  # every ticket taken, 2 launched
    assert len(store.job_ids()) == 2

    records = BatchRecords(read_manifest(open_storage(store.uri), batch.group_id), None)
    second = driver_module.Driver(records)
    wait_until(lambda: second.step().done, 90, "the next driver to finish the batch")
    assert batch.results(cleanup=False, timeout=30) == list(range(6))
    assert sorted(v for v, _ in h.runs(slots)) == list(range(6)), "a child ran twice"
    assert sorted((t["index"], t["attempt"]) for t in ledger(store, batch.group_id)) == [
        (i, 1) for i in range(6)
    ]


@pytest.mark.timeout(180)
def test_cancelled_children_of_a_batch_whose_submitter_died_read_cancelled(
    store: Store, spawn: Any
) -> None:
    """Regression: children a cancel kept from launching read CANCELLED (they read
    SUBMIT_FAILED, with a JobCancelled inside, once the submitter was gone)."""
    never = store.path("never-opened")
    spec = {"fn": "gated", "inputs": [[i, never] for i in range(6)], "max_concurrency": 2}
    proc = spawn(h.SUBMIT_AND_EXIT, store.uri, json.dumps(spec), "linger")
    group_id = Lines(proc).next_json(60, "the group id")["group_id"]
    running_children(store, group_id, 2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    batch = kc.attach_batch(group_id, target=store.target, poll_timeout=90)
    batch.cancel()
    assert batch.wait(timeout=60) == ["CANCELLED"] * 6
    assert batch.status_counts() == {"CANCELLED": 6}
    assert [f.status for f in batch.failed_children()] == ["CANCELLED"] * 6
    final = list(batch.progress(timeout=30))[-1]
    assert final.counts == {kc.ChildStatus.CANCELLED: 6}


@pytest.mark.timeout(180)
def test_fail_fast_stops_the_batch_and_cancels_the_rest(store: Store) -> None:
    """20 inputs, child 3 fails, max_concurrency=4: nothing is launched after the failure
    was observed (within one poll interval), the rest read CANCELLED."""
    slots = store.path("slots")
    os.mkdir(slots)
    target = kc.Target(storage=store.uri, poll_interval=0.5)
    batch = kc.submit_map(
        h.slotted,
        [{"value": i, "slots": slots, "then_sleep": 3.0, "fail": 3} for i in range(20)],
        target=target,
        max_concurrency=4,
        fail_fast=True,
    )
    statuses = wait_statuses(batch, 120)
    assert statuses[3] == "FAILED"
    others = [s for i, s in enumerate(statuses) if i != 3]
    assert set(others) <= {"SUCCEEDED", "CANCELLED"}, statuses
    assert others.count("CANCELLED") >= 20 - 4 - 4, statuses  # at most 4 more ran before 3 ended
    observed = (store.batch_dir(batch.group_id) / "state" / "failed_fast").stat().st_mtime
    late = [t for t in ledger(store, batch.group_id) if t["at"] > observed + 0.5]
    assert late == [], f"children launched after the failure was observed: {late}"
    assert h.most_seen(slots) <= 4
    with pytest.raises(kc.BatchError) as info:
        batch.results(cleanup=False, timeout=60)
    err = info.value
    assert 3 in [index_of(j) for j in err.failures]
    assert "child 3 fails on purpose" in err.reports[3]  # the remote exception
    assert 'raise RuntimeError(f"child {value} fails on purpose")' in err.reports[3]  # traceback
    assert all(isinstance(e, kc.JobCancelled) for e in err.submission_failures.values())
    assert all("fail_fast" in str(e) for e in err.submission_failures.values())
    # Issue 35 item 2: the message said "20 of 20 jobs failed" when 1 failed.
    assert err.counts["failed"] == 1
    assert err.counts["cancelled"] + err.counts["not launched"] == statuses.count("CANCELLED")
    assert "gave no value: 1 failed" in str(err) and "not launched" in str(err), str(err)


@pytest.mark.timeout(120)
def test_log_tail_prefixes_child_lines_and_bounds_them_per_read(store: Store) -> None:
    batch = kc.submit_map(h.chatty, [(i, 30) for i in range(3)], target=store.target)
    tail = batch.log_tail(lines_per_child=5)
    reads = []
    for _ in batch.progress(timeout=90):
        reads.append(tail.read())
    lines = [line for read in reads for line in read]
    for i in range(3):
        mine = [line for read in reads for line in read if line.startswith(f"[child {i}] ")]
        assert f"[child {i}] line 29 of {i}" in mine  # the last line always shows
        for read in reads:  # at most 5 lines of a child per read, plus a skipped note
            own = [line for line in read if line.startswith(f"[child {i}] line")]
            assert len(own) <= 5
    assert any("lines skipped" in line for line in lines)


def cli_cancel(store: Store, group_id: str) -> None:
    """``kinetic batch cancel`` in its own process."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kinetic_core.cli",
            "--storage",
            store.uri,
            "batch",
            "cancel",
            group_id,
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    assert "cancel requested" in done.stdout


def running_children(store: Store, group_id: str, n: int) -> None:
    def check() -> bool:
        batch = kc.attach_batch(group_id, target=store.target)
        return batch.statuses()[:n] == ["RUNNING"] * n

    wait_until(check, 60, f"{n} running children")


@pytest.mark.timeout(180)
def test_durable_cancel_from_another_process_stops_the_submitter(store: Store, spawn: Any) -> None:
    never = store.path("never-opened")
    spec = {
        "fn": "gated",
        "inputs": [[i, never] for i in range(8)],
        "max_concurrency": 2,
        "retries": 2,
    }
    proc = spawn(h.SUBMITTER, store.uri, json.dumps(spec))
    group_id = Lines(proc).next_json(60, "the group id")["group_id"]
    running_children(store, group_id, 2)  # both slots taken: the submitter waits for one

    cli_cancel(store, group_id)
    cancel_at = (store.batch_dir(group_id) / "state" / "cancel_requested").stat().st_mtime
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        pytest.fail("the submitter kept running after the batch was cancelled")
    assert proc.returncode == 0

    records = store.records(group_id)
    assert len(records) < 8
    launched_after = [
        i for i, r in records.items() if store.handle(r["attempts"][0])["created_at"] > cancel_at
    ]
    assert launched_after == [], f"children {launched_after} were launched after the cancel"

    batch = kc.attach_batch(group_id, target=store.target, poll_timeout=90)
    values = batch.results(return_exceptions=True, cleanup=False, timeout=90)
    for i, value in enumerate(values):
        assert isinstance(value, kc.JobCancelled), (i, value)
        if i not in records:
            assert "not submitted: the batch was cancelled" in str(value), (i, value)
    statuses = batch.statuses()
    assert [statuses[i] for i in sorted(records)] == ["CANCELLED"] * len(records)
    records = store.records(group_id)
    assert all(len(r["attempts"]) == 1 for r in records.values()), "a cancelled child was retried"
    assert len(store.job_ids()) == len(records)
    assert batch.cancel_requested


@pytest.mark.timeout(120)
def test_cancel_from_another_process_ends_the_submitters_wait(store: Store) -> None:
    never = store.path("never-opened")
    batch = kc.submit_map(
        h.gated, [(i, never) for i in range(6)], target=store.target, max_concurrency=2, retries=1
    )
    running_children(store, batch.group_id, 2)
    cli_cancel(store, batch.group_id)
    # The process that submitted (still alive) must not wait STALE_AFTER for children
    # that a cancel kept from ever being submitted.
    values = batch.results(return_exceptions=True, cleanup=False, timeout=30)
    assert all(isinstance(v, kc.JobCancelled) for v in values), values
    assert all("not submitted: the batch was cancelled" in str(v) for v in values[2:]), values
    assert len(store.records(batch.group_id)) == 2
    # the 4 inputs the cancel kept from launching read CANCELLED too (docs/batches.md)
    assert batch.status_counts() == {"CANCELLED": 6}


# ---- idempotent resubmission ----------------------------------------------------------------


@pytest.mark.timeout(180)
def test_orchestrator_retry_resubmits_only_missing_and_failed_children(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    flag = store.path("outage")
    open_gate(flag)  # the outage is on
    monkeypatch.setattr(h.Picky, "broken", True)
    inputs = [(0, None), (1, flag), (2, None), (3, None), (4, flag), (h.Picky(5), None)]
    key = "dag=nightly/task=sweep/run=2026-11-21"

    first = kc.submit_map(h.fail_while, inputs, target=store.target, idempotency_key=key)
    with pytest.raises(kc.BatchError) as info:
        first.results(cleanup=False, timeout=90)
    assert sorted(index_of(j) for j in info.value.failures) == [1, 4]
    assert list(info.value.submission_failures) == [5]
    assert len(store.job_ids()) == 5

    # The orchestrator retries the task after the outage ended, with the same key.
    Path(flag).unlink()
    monkeypatch.setattr(h.Picky, "broken", False)
    retry = kc.submit_map(h.fail_while, inputs, target=store.target, idempotency_key=key)
    assert retry.group_id == first.group_id
    retry.wait_submitted(90)
    assert retry.results(cleanup=False, timeout=90) == [0, 1, 2, 3, 4, 5]
    assert len(store.job_ids()) == 5 + 3, (
        "the retry should submit new attempts for the 2 failed children and the one that "
        f"failed to submit, and nothing else; storage has {len(store.job_ids())} jobs"
    )
    records = store.records(first.group_id)
    assert [len(records[i]["attempts"]) for i in range(6)] == [1, 2, 1, 1, 2, 1]

    # Once everything succeeded, yet another retry submits nothing.
    again = kc.submit_map(h.fail_while, inputs, target=store.target, idempotency_key=key)
    again.wait_submitted(60)
    assert again.group_id == first.group_id
    assert again.results(cleanup=False, timeout=60) == [0, 1, 2, 3, 4, 5]
    assert len(store.job_ids()) == 8


@pytest.mark.timeout(60)
def test_idempotent_resubmit_with_other_inputs_is_refused(store: Store) -> None:
    batch = kc.submit_map(h.square_or_fail, [1, 2], target=store.target, idempotency_key="k-inputs")
    batch.wait_submitted(30)
    with pytest.raises(kc.ConfigError, match="use a new key"):
        kc.submit_map(h.square_or_fail, [1, 2, 3], target=store.target, idempotency_key="k-inputs")
    assert batch.results(timeout=60) == [1, 4]
    assert len(store.job_ids()) == 2


# ---- async ----------------------------------------------------------------------------------


@pytest.mark.timeout(150)
def test_async_aas_completed_and_aresults(store: Store) -> None:
    batch = kc.submit_map(
        h.flaky,
        flaky_inputs(store, 4, always={2}),
        target=store.target,
        retries=1,
        max_concurrency=4,
    )

    async def main() -> tuple[list[kc.JobHandle], list[Any], kc.BatchError, list[str]]:
        seen = [job async for job in batch.aas_completed(timeout=120)]
        values = await batch.aresults(return_exceptions=True, cleanup=False, timeout=60)
        attached = kc.attach_batch(batch.group_id, target=store.target)
        try:
            await attached.aresults(cleanup=False, timeout=60)
        except kc.BatchError as exc:
            error = exc
        else:
            pytest.fail("aresults() should raise BatchError for the failed child")
        return seen, values, error, await batch.await_(timeout=60)

    seen, values, error, statuses = asyncio.run(main())
    assert sorted(index_of(j) for j in seen) == [0, 1, 2, 3]
    assert all(j.attempt == 2 for j in seen), "as_completed yields each child's final attempt"
    assert values[0] == 0 and values[1] == 1 and values[3] == 3
    assert isinstance(values[2], RuntimeError)
    assert error.partial_results == [0, 1, None, 3]
    assert [index_of(j) for j in error.failures] == [2] and error.failures[0].attempt == 2
    assert statuses == ["SUCCEEDED", "SUCCEEDED", "FAILED", "SUCCEEDED"]


# ---- bad input ------------------------------------------------------------------------------

BAD_CALLS: dict[str, tuple[type[Exception], Callable[[kc.Target], Any]]] = {
    "empty inputs": (kc.ConfigError, lambda t: kc.submit_map(h.describe, [], target=t)),
    "string inputs": (kc.ConfigError, lambda t: kc.submit_map(h.describe, "abc", target=t)),
    "fail_fast not a bool": (
        kc.ConfigError,
        lambda t: kc.submit_map(h.describe, [1], target=t, fail_fast="yes"),
    ),
    "max_concurrency 0": (
        kc.ConfigError,
        lambda t: kc.submit_map(h.describe, [1], target=t, max_concurrency=0),
    ),
    "max_concurrency float": (
        kc.ConfigError,
        lambda t: kc.submit_map(h.describe, [1], target=t, max_concurrency=2.5),
    ),
    "negative retries": (
        kc.ConfigError,
        lambda t: kc.submit_map(h.describe, [1], target=t, retries=-1),
    ),
    "unknown input_mode": (
        kc.ConfigError,
        lambda t: kc.submit_map(h.describe, [1], target=t, input_mode="zip"),
    ),
    "non-identifier kwargs": (
        kc.ConfigError,
        lambda t: kc.submit_map(h.describe, [{"a": 1}, {"not-ok": 2}], target=t),
    ),
    "non-str kwargs key": (
        kc.ConfigError,
        lambda t: kc.submit_map(h.describe, [{1: 2}], target=t, input_mode="kwargs"),
    ),
    "args mode scalar": (
        kc.ConfigError,
        lambda t: kc.submit_map(h.describe, [(1,), 2], target=t, input_mode="args"),
    ),
    "bad tags": (kc.ConfigError, lambda t: kc.submit_map(h.describe, [1], target=t, tags={"a": 1})),
    "not callable": (kc.SubmissionError, lambda t: kc.submit_map(42, [1], target=t)),
    "unknown group id": (kc.JobNotFound, lambda t: kc.attach_batch("no-such-batch-123", target=t)),
    "unsafe group id": (kc.InvalidIdError, lambda t: kc.attach_batch("../etc", target=t)),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_bad_input_is_a_typed_error_and_writes_nothing(store: Store, case: str) -> None:
    error, call = BAD_CALLS[case]
    with pytest.raises(error) as info:
        call(store.target)
    assert len(str(info.value)) > 20  # the message says what was wrong
    batches = store.root / "batches"
    assert not batches.exists() or not any(batches.iterdir())
    assert store.job_ids() == []


@pytest.mark.timeout(120)
def test_collected_results_are_never_reported_as_failures(store: Store) -> None:
    """Issue 35 item 2: ``results()`` a second time raised ``BatchError: 3 of 3 jobs
    failed``, each entry a JobFailed of a SUCCEEDED job."""
    batch = kc.submit_map(h.square_or_fail, [1, 2, 3], target=store.target)
    assert batch.results(timeout=90) == [1, 4, 9]
    with pytest.raises(kc.ResultNotAvailable, match="already collected") as info:
        batch.results(timeout=30)
    assert "3 of 3 inputs" in str(info.value) and "failed" not in str(info.value).split("(")[0]
    again = batch.results(timeout=30, return_exceptions=True)
    assert all(isinstance(e, kc.ResultNotAvailable) for e in again), again
    assert batch.statuses() == ["SUCCEEDED"] * 3
