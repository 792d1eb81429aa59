"""``kinetic --storage URI batch list|status|results|cancel|cleanup`` end to end.

Batches run on the real local backend; the CLI is driven through ``kinetic_core.cli.main``
with its output captured. Exit codes: 0 ok, 1 the batch failed, 2 bad usage / kinetic error.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import kinetic_core as kc
from kinetic_core.batch.driver import driver_jobs
from kinetic_core.cli import main
from tests.cleanup import kill_leftovers
from tests.core import batch_helpers as h

os.environ.setdefault("KINETIC_KILL_GRACE", "2")


def wait_until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)
    return value


@dataclass
class Batches:
    root: Path
    mixed: kc.BatchHandle  # inputs [1, 7, 3, 17, 5]: 7 and 17 fail
    ok: kc.BatchHandle  # inputs [1, 2, 3]

    @property
    def uri(self) -> str:
        return f"file://{self.root}"


@pytest.fixture(scope="module")
def batches(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Batches]:
    root = tmp_path_factory.mktemp("cli") / "store"
    target = kc.Target(storage=f"file://{root}")
    try:
        mixed = kc.submit_map(h.square_or_fail, [1, 7, 3, 17, 5], target=target, name="mixed")
        mixed.wait(timeout=120)
        ok = kc.submit_map(h.square_or_fail, [1, 2, 3], target=target, name="ok")
        ok.wait(timeout=120)
        yield Batches(root, mixed, ok)
    finally:
        kill_leftovers(root)


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rich tables fold long ids in a narrow console; give them room."""
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.delenv("KINETIC_SIGNING_KEY", raising=False)


def cli(capsys: pytest.CaptureFixture[str], uri: str, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(["--storage", uri, "batch", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_list_json_newest_first_with_counts(
    batches: Batches, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, _ = cli(capsys, batches.uri, "list", "--json")
    assert rc == 0
    listed = json.loads(out)
    assert [b["group_id"] for b in listed] == [batches.ok.group_id, batches.mixed.group_id]
    mixed = listed[1]
    assert mixed == {
        "group_id": batches.mixed.group_id,
        "name": "mixed",
        "total": 5,
        "submission_complete": True,
        "cancel_requested": False,
        "counts": {"SUCCEEDED": 3, "FAILED": 2},
    }
    assert listed[0]["counts"] == {"SUCCEEDED": 3}

    rc, out, _ = cli(capsys, batches.uri, "list", "--limit", "1", "--json")
    assert rc == 0 and [b["group_id"] for b in json.loads(out)] == [batches.ok.group_id]


def test_list_table(batches: Batches, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = cli(capsys, batches.uri, "list")
    assert rc == 0
    assert "2 batches" in out
    assert batches.mixed.group_id in out and batches.ok.group_id in out
    assert "FAILED=2" in out and "SUCCEEDED=3" in out


def test_status_json_counts_and_exit_code(
    batches: Batches, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, _ = cli(capsys, batches.uri, "status", batches.mixed.group_id, "--json")
    assert rc == 1  # some children failed
    assert json.loads(out)["counts"] == {"SUCCEEDED": 3, "FAILED": 2}

    rc, out, _ = cli(capsys, batches.uri, "status", batches.ok.group_id, "--json")
    assert rc == 0
    summary = json.loads(out)
    assert summary["counts"] == {"SUCCEEDED": 3} and summary["total"] == 3
    assert summary["submission_complete"] is True


@pytest.mark.timeout(60)
def test_status_watch_finishes_on_a_completed_batch(
    batches: Batches, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = cli(capsys, batches.uri, "status", batches.mixed.group_id, "--watch", "--json")
    assert rc == 1
    assert json.loads(out)["counts"] == {"SUCCEEDED": 3, "FAILED": 2}  # stdout: only JSON
    assert "5/5" in err  # the progress bar (on stderr with --json) reached the end

    rc, out, _ = cli(capsys, batches.uri, "status", batches.ok.group_id, "--watch")
    assert rc == 0 and "3/3" in out
    assert "{" not in out and "│ SUCCEEDED │      3 │" in out  # a table at the end, not a dict


@pytest.mark.timeout(60)
def test_results_of_a_failed_batch_exit_1_and_print_the_errors(
    batches: Batches, capsys: pytest.CaptureFixture[str]
) -> None:
    group_id = batches.mixed.group_id
    rc, out, err = cli(capsys, batches.uri, "results", group_id, "--keep")
    assert rc == 1
    assert f"Batch {group_id}: 2 of 5 jobs failed" in err
    jobs = batches.mixed.jobs
    for i in (1, 3):
        job = jobs[i]
        assert job is not None
        assert job.job_id in err
        assert f"ValueError: input {[1, 7, 3, 17, 5][i]} is bad" in err
    assert out == ""

    rc, out, err = cli(capsys, batches.uri, "results", group_id, "--keep", "--json")
    assert rc == 1
    assert json.loads(out) == {"group_id": group_id, "partial_results": [1, None, 9, None, 25]}


@pytest.mark.timeout(60)
def test_results_of_a_good_batch(batches: Batches, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = cli(capsys, batches.uri, "results", batches.ok.group_id, "--keep", "--json")
    assert rc == 0 and err == ""
    assert json.loads(out) == {"group_id": batches.ok.group_id, "results": [1, 4, 9]}
    rc, out, _ = cli(capsys, batches.uri, "results", batches.ok.group_id, "--keep")
    assert rc == 0 and "[1, 4, 9]" in out


@pytest.mark.parametrize(
    ("group_id", "message"),
    [
        ("no-such-batch-123", "No batch 'no-such-batch-123'"),
        ("Not/A/Valid/Id", "Invalid group id"),
    ],
)
@pytest.mark.parametrize("command", ["status", "results", "cancel", "cleanup"])
def test_unknown_or_invalid_group_is_exit_2(
    batches: Batches, capsys: pytest.CaptureFixture[str], command: str, group_id: str, message: str
) -> None:
    rc, _out, err = cli(capsys, batches.uri, command, group_id)
    assert rc == 2
    assert err.startswith("error: ") and message in err
    assert not (batches.root / "batches" / "no-such-batch-123").exists()


@pytest.fixture
def own_store(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "store"
    yield root
    kill_leftovers(root)


@pytest.mark.timeout(120)
def test_cancel_then_results(
    own_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = f"file://{own_store}"
    never = str(tmp_path / "never-opened")
    batch = kc.submit_map(
        h.gated, [(i, never) for i in range(3)], target=kc.Target(storage=uri), max_concurrency=3
    )
    batch.wait_submitted(60)
    wait_until(lambda: batch.statuses() == ["RUNNING"] * 3, 60, "3 running children")
    rc, out, err = cli(capsys, uri, "results", batch.group_id, "--timeout", "0.2")
    assert rc == 124 and out == "" and err.startswith("error: ")  # the batch runs on
    rc, out, _ = cli(capsys, uri, "status", batch.group_id, "--json")
    assert rc == 0 and json.loads(out)["counts"] == {"RUNNING": 3}

    rc, out, _ = cli(capsys, uri, "cancel", batch.group_id)
    assert rc == 0 and out.strip() == f"{batch.group_id}: cancel requested"
    assert (own_store / "batches" / batch.group_id / "state" / "cancel_requested").exists()
    wait_until(lambda: batch.statuses() == ["CANCELLED"] * 3, 60, "3 cancelled children")

    rc, out, _ = cli(capsys, uri, "status", batch.group_id, "--json")
    summary = json.loads(out)
    assert summary["counts"] == {"CANCELLED": 3} and summary["cancel_requested"] is True

    rc, out, err = cli(capsys, uri, "results", batch.group_id, "--timeout", "60")
    assert rc == 1
    # Issue 35 item 2: cancelled inputs were counted as "3 of 3 jobs failed".
    assert f"Batch {batch.group_id}: 3 of 3 inputs gave no value: 3 cancelled" in err
    assert err.count("Cancelled") >= 3


@pytest.mark.timeout(120)
def test_cleanup_frees_backend_and_stored_envelopes(
    own_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = f"file://{own_store}"
    batch = kc.submit_map(h.square_or_fail, [2, 7], target=kc.Target(storage=uri))
    assert batch.wait(timeout=90) == ["SUCCEEDED", "FAILED"]
    jobs = [j for j in batch.jobs if j]
    assert all((own_store / "backend-local" / j.job_id).exists() for j in jobs)

    drivers = driver_jobs(batch.records)
    assert len(drivers) == 1
    drivers[0].wait(timeout=60)  # the detached driver ends once every child is final
    rc, out, _ = cli(capsys, uri, "cleanup", batch.group_id)
    assert rc == 0 and out.strip() == f"{batch.group_id}: cleaned up"
    assert not (own_store / "backend-local" / drivers[0].job_id).exists()
    for job in jobs:
        assert not (own_store / "backend-local" / job.job_id).exists()
        assert not (own_store / "jobs" / job.job_id / "payload.pkl").exists()
        assert not (own_store / "jobs" / job.job_id / "result.pkl").exists()
    rc, out, _ = cli(capsys, uri, "status", batch.group_id, "--json")
    assert rc == 1 and json.loads(out)["counts"] == {"SUCCEEDED": 1, "FAILED": 1}


@pytest.mark.timeout(120)
def test_children_never_submitted_of_a_cancelled_batch_read_cancelled(
    own_store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = f"file://{own_store}"
    never = str(tmp_path / "never-opened")
    batch = kc.submit_map(
        h.gated, [(i, never) for i in range(3)], target=kc.Target(storage=uri), max_concurrency=1
    )
    wait_until(lambda: batch.statuses()[0] == "RUNNING", 60, "the first child running")
    batch.cancel()
    batch.wait_submitted(60)
    assert batch.wait(timeout=60) == [kc.ChildStatus.CANCELLED] * 3
    attached = kc.attach_batch(batch.group_id, target=kc.Target(storage=uri))
    assert attached.statuses() == [kc.ChildStatus.CANCELLED] * 3
    assert attached.status_counts() == {kc.ChildStatus.CANCELLED: 3}
    assert [f.status for f in attached.failed_children()] == [kc.ChildStatus.CANCELLED] * 3
    assert [f.job is None for f in attached.failed_children()] == [False, True, True]
    final = list(attached.progress(timeout=30))[-1]
    assert final.counts == {kc.ChildStatus.CANCELLED: 3}

    rc, out, _ = cli(capsys, uri, "status", batch.group_id, "--json")
    assert rc == 1 and json.loads(out)["counts"] == {"CANCELLED": 3}


@pytest.mark.timeout(120)
def test_results_twice_says_already_collected(
    own_store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 35 item 2: the second ``batch results`` exited 1 with "2 of 2 jobs failed"
    while ``batch status`` showed SUCCEEDED 2."""
    uri = f"file://{own_store}"
    batch = kc.submit_map(h.square_or_fail, [2, 3], target=kc.Target(storage=uri))
    rc, out, _ = cli(capsys, uri, "results", batch.group_id, "--timeout", "90")
    assert rc == 0 and "[4, 9]" in out
    rc, out, err = cli(capsys, uri, "results", batch.group_id, "--timeout", "30")
    assert rc == 2 and out == ""
    assert "already collected" in err and "failed" not in err.split("(")[0], err
    rc, out, _ = cli(capsys, uri, "status", batch.group_id, "--json")
    assert rc == 0 and json.loads(out)["counts"] == {"SUCCEEDED": 2}
