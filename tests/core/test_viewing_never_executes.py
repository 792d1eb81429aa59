"""Viewing a job never runs its code (issue 33): a job's result and exception are pickles
the job wrote, and unpickling one runs code of the job's choosing. The dashboard's pages and
API, ``kinetic jobs status``/``list`` and the failure descriptions the providers print read
what the runner wrote for viewing (a bounded preview, the failure as data); only
``result()`` unpickles, in the caller's process.

Each trap job gets its own folder: a ``marker-{pid}`` there means that process unpickled it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

import kinetic_core as kc
from kinetic_core.cli.app import run as cli_main
from kinetic_core.records import layout
from kinetic_core.storage import open_storage
from kinetic_core.ui import create_app
from tests.cleanup import kill_leftovers
from tests.core import trapfns


@dataclass
class Traps:
    uri: str
    folders: dict[str, Path]
    jobs: dict[str, kc.JobHandle]
    batch: kc.BatchHandle


@pytest.fixture(scope="module")
def traps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traps]:
    root = tmp_path_factory.mktemp("traps")
    uri = f"file://{root / 'store'}"
    folders = {name: root / name for name in ("value", "error", "old", "batch", "endless")}
    for folder in folders.values():
        folder.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KINETIC_STORAGE", uri)
        mp.delenv("KINETIC_SIGNING_KEY", raising=False)
        mp.delenv("KINETIC_BACKEND", raising=False)
        jobs = {
            "value": kc.submit(trapfns.return_trap, (str(folders["value"]),)),
            "error": kc.submit(trapfns.raise_trap, (str(folders["error"]),)),
            "old": kc.submit(trapfns.return_trap, (str(folders["old"]),)),
            "endless": kc.submit(trapfns.return_endless),
            "big": kc.submit(trapfns.return_big),
        }
        batch = kc.submit_map(trapfns.raise_trap, [str(folders["batch"])], name="traps")
        for job in jobs.values():
            job.wait(timeout=120)
        batch.wait(timeout=120)
        # A store written before previews existed: the result, and no preview beside it.
        old = open_storage(uri)
        old.delete(layout.job_file(jobs["old"].job_id, "preview.json"))
        yield Traps(uri, folders, jobs, batch)
        kill_leftovers(root / "store")


def unpickled_here(folder: Path) -> bool:
    return (folder / f"marker-{os.getpid()}").exists()


@pytest.fixture(autouse=True)
def no_markers(traps: Traps) -> None:
    """Each test starts clean: a marker an earlier (failing) test left is not this one's."""
    for folder in traps.folders.values():
        for marker in folder.glob("marker-*"):
            marker.unlink()


def test_the_traps_are_live_result_unpickles_in_the_caller(
    storage_uri: str, tmp_path: Path, traps: Traps
) -> None:
    """The control: an explicit ``result()`` loads the value, and so runs the trap."""
    job = kc.submit(trapfns.return_trap, (str(tmp_path),))
    assert job.result(timeout=60) == "sprung"
    assert unpickled_here(tmp_path)


def test_a_job_page_and_api_show_a_result_without_unpickling_it(traps: Traps) -> None:
    client = TestClient(create_app(traps.uri))
    job = traps.jobs["value"]
    data = client.get(f"/api/jobs/{job.job_id}").json()
    page = client.get(f"/jobs/{job.job_id}")
    listing = client.get("/api/jobs")
    assert page.status_code == 200 and listing.status_code == 200
    assert not unpickled_here(traps.folders["value"])
    assert data["state"]["status"] == "SUCCEEDED"
    assert data["outcome"]["kind"] == "result" and "Trap(in " in data["outcome"]["text"]
    assert "Trap(in " in page.text


def test_a_failed_job_page_and_api_show_the_failure_without_unpickling_it(traps: Traps) -> None:
    client = TestClient(create_app(traps.uri))
    job = traps.jobs["error"]
    data = client.get(f"/api/jobs/{job.job_id}").json()
    page = client.get(f"/jobs/{job.job_id}")
    assert page.status_code == 200
    assert not unpickled_here(traps.folders["error"])
    assert data["outcome"]["kind"] == "error" and data["outcome"]["type"] == "TrapError"
    assert "trap in " in data["outcome"]["text"] and "Traceback" in data["outcome"]["text"]


def test_a_batch_page_shows_failed_children_without_unpickling_them(traps: Traps) -> None:
    client = TestClient(create_app(traps.uri))
    data = client.get(f"/api/batches/{traps.batch.group_id}").json()
    assert client.get(f"/batches/{traps.batch.group_id}").status_code == 200
    assert not unpickled_here(traps.folders["batch"])
    (failed,) = data["failed"]
    assert "TrapError" in failed["error"] and "trap in " in failed["error"]


def test_kinetic_jobs_status_and_list_never_unpickle(traps: Traps) -> None:
    for name in ("value", "error"):
        job_id = traps.jobs[name].job_id
        for args in (
            ["status", job_id],
            ["status", job_id, "--json"],
            ["list"],
            ["list", "--json"],
        ):
            cli_main(["--storage", traps.uri, "jobs", *args])
        assert not unpickled_here(traps.folders[name]), name


def test_failure_descriptions_the_providers_print_never_unpickle(traps: Traps) -> None:
    """The Airflow sensor and batch operator, and Prefect's artifacts, print these."""
    job = traps.jobs["error"]
    text = kc.describe_failure(job, kc.failure_data(job))
    assert "TrapError" in text and "trap in " in text
    with pytest.raises(kc.BatchError) as caught:
        traps.batch.results(cleanup=False, return_exceptions=False, timeout=60)
    folder = traps.folders["batch"]
    for marker in folder.glob("marker-*"):  # results() is a collection: it may unpickle
        marker.unlink()
    text = kc.describe_batch_failure(caught.value)
    assert "TrapError" in text and not unpickled_here(folder)


def test_an_older_job_without_a_preview_is_named_not_unpickled(traps: Traps) -> None:
    client = TestClient(create_app(traps.uri))
    data = client.get(f"/api/jobs/{traps.jobs['old'].job_id}").json()
    assert not unpickled_here(traps.folders["old"])
    assert data["outcome"]["available"] is False
    assert "no preview (written by an older version" in data["outcome"]["text"]


def _within(seconds: float, call: Any) -> Any:
    """``call()``'s value, or a failure if it has not returned within ``seconds`` (a hung
    server thread would hang the test run otherwise)."""
    box: list[Any] = []
    thread = threading.Thread(target=lambda: box.append(call()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert box, f"no answer within {seconds} s: the view is stuck"
    return box[0]


def test_an_endless_repr_neither_hangs_the_job_nor_the_server(traps: Traps) -> None:
    job = traps.jobs["endless"]
    assert job.state().status is kc.JobStatus.SUCCEEDED  # the runner was not held up
    client = TestClient(create_app(traps.uri))
    data = _within(60, lambda: client.get(f"/api/jobs/{job.job_id}").json())
    assert data["outcome"]["available"] is False
    assert "took longer than" in data["outcome"]["text"]


def test_a_preview_is_bounded_in_size(traps: Traps) -> None:
    client = TestClient(create_app(traps.uri))
    data = client.get(f"/api/jobs/{traps.jobs['big'].job_id}").json()
    assert data["outcome"]["available"] is True
    assert 100 < len(data["outcome"]["text"]) <= 4000
    stored = open_storage(traps.uri).read_bytes(
        layout.job_file(traps.jobs["big"].job_id, "preview.json")
    )
    assert len(stored) < 16_000
