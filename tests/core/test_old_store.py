"""A store written before the re-layout by layer (ddc7209) reads after it (issue 32).

stores/store-ddc7209.tar.gz was written by tests/core/old_store_writer.py run with the code
of ddc7209 (its docstring says how to regenerate it). Its pickles name the old module paths
(``kinetic_core.data.Data``, ``kinetic_core.config.Target``, ``kinetic_core.errors``...) and
its jobs' processes are long gone: every decided outcome must still read as decided.
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kinetic_core as kc
from kinetic_core.cli import main
from kinetic_core.records import layout
from kinetic_core.records.envelope import load_envelope
from kinetic_core.storage import open_storage
from tests.cleanup import kill_leftovers

ARCHIVE = Path(__file__).parent / "stores" / "store-ddc7209.tar.gz"
REPO = Path(__file__).resolve().parents[2]


class OldStore:
    """The unpacked store: its URI and what the old code read for each job."""

    def __init__(self, root: Path, expected: dict[str, Any]) -> None:
        self.root = root
        self.uri = f"file://{root}"
        self.expected = expected
        self.jobs: dict[str, dict[str, Any]] = expected["jobs"]
        self.batch: dict[str, Any] = expected["batch"]

    def job(self, name: str) -> kc.JobHandle:
        return kc.attach(self.jobs[name]["job_id"])


def _relocate(root: Path, old_uri: str, new_uri: str) -> None:
    """Point the JSON records at the store's new place (handle.json, the batch manifest).

    Why: the store was written at another path, and a handle.json naming another root is
    refused as CorruptRecord (by the old code as by the new: a store is read where it was
    written, as after an upgrade in place). The pickles keep the old URI: unsigned
    envelopes are not bound to their root.
    """
    for path in root.rglob("*.json"):
        text = path.read_text()
        if old_uri in text:
            path.write_text(text.replace(old_uri, new_uri))


@pytest.fixture
def old_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[OldStore]:
    """The archive unpacked into tmp_path, set as KINETIC_STORAGE."""
    with tarfile.open(ARCHIVE) as tar:
        tar.extractall(tmp_path, filter="data")
    expected = json.loads((tmp_path / "expected.json").read_text())
    store = OldStore(tmp_path / "store", expected)
    _relocate(store.root, expected["storage"], store.uri)
    monkeypatch.setenv("KINETIC_STORAGE", store.uri)
    monkeypatch.delenv("KINETIC_SIGNING_KEY", raising=False)
    monkeypatch.delenv("KINETIC_BACKEND", raising=False)
    yield store
    kill_leftovers(store.root)


def _double(n: int) -> int:
    """Stands in for the idempotent job's function: it must not run again."""
    return n * 2


def test_archive_is_small_and_relative() -> None:
    assert ARCHIVE.stat().st_size < 1_000_000
    with tarfile.open(ARCHIVE) as tar:
        names = tar.getnames()
    assert "expected.json" in names
    assert all(not n.startswith("/") and ".." not in n.split("/") for n in names)


def test_list_jobs_finds_every_job(old_store: OldStore) -> None:
    listed = {h.job_id for h in kc.list_jobs()}
    assert listed == set(old_store.expected["listed"])
    named = {j["job_id"] for j in old_store.jobs.values()}
    assert named | set(old_store.batch["children"]) | set(old_store.expected["driver"]) == listed
    drivers = kc.list_jobs(tags={"kinetic/batch-driver": old_store.batch["group_id"]})
    assert [h.job_id for h in drivers] == old_store.expected["driver"]
    assert {kc.batch_of(h) for h in kc.list_jobs() if h.job_id not in named} == {
        old_store.batch["group_id"]
    }


def test_states_read_as_decided(old_store: OldStore) -> None:
    for name, want in old_store.jobs.items():
        state = old_store.job(name).state()
        got = {
            "status": state.status.value,
            "reason": state.reason,
            "exit_code": state.exit_code,
            "collected": state.collected,
        }
        assert got == {k: want[k] for k in got}, name
        assert state.status is not kc.JobStatus.NOT_FOUND and state.reason != "Lost", name
    states = kc.resolve_states([old_store.job(n) for n in old_store.jobs])
    assert [s.status.value for s in states] == [j["status"] for j in old_store.jobs.values()]


def test_history_reads(old_store: OldStore) -> None:
    for name, want in old_store.jobs.items():
        history = old_store.job(name).history()
        assert [[t.status.value, t.reason] for t in history] == want["history"], name
        assert all(isinstance(t, kc.Transition) and t.at is not None for t in history)
    record = old_store.root / "jobs" / old_store.jobs["history"]["job_id"] / "history"
    assert (record / "RUNNING-none.json").exists()  # a recorded transition, not inferred


def test_uncollected_result_returns_moved_classes(old_store: OldStore) -> None:
    from kinetic_core.config import Target
    from kinetic_core.data.inputs import Data

    job = old_store.job("uncollected")
    value = job.result(timeout=10, cleanup=False)
    assert type(value["data"]) is Data is kc.Data
    assert type(value["data"]).__module__ == "kinetic_core.data.inputs"
    assert value["data"] == Data("gs://old-bucket/sets/train/")
    assert value["data"].is_gcs and value["data"].is_dir
    assert type(value["target"]) is Target is kc.Target
    assert value["target"].backend == "local" and value["target"].life_span == 600
    want = old_store.jobs["uncollected"]["result"]
    assert value["n"] == want["n"] == 7
    assert json.loads(json.dumps(value["plain"])) == want["plain"]
    assert value["plain"][4] == {"k": (4, 5)}
    assert job.result(timeout=10) == value  # collects and cleans up now
    assert job.state().collected
    with pytest.raises(kc.ResultNotAvailable):
        job.result(timeout=10)


def test_collected_result_is_not_available(old_store: OldStore) -> None:
    assert old_store.jobs["collected"]["result_was"] == 42
    with pytest.raises(kc.ResultNotAvailable):
        old_store.job("collected").result(timeout=10)


@pytest.mark.parametrize(
    ("name", "kind"), [("config_error", kc.errors.ConfigError), ("value_error", ValueError)]
)
def test_failed_jobs_raise_the_remote_exception(
    old_store: OldStore, name: str, kind: type[Exception]
) -> None:
    want = old_store.jobs[name]["error"]
    job = old_store.job(name)
    with pytest.raises(kind) as info:
        job.result(timeout=10)
    assert type(info.value) is kind
    assert f"{kind.__module__}.{kind.__qualname__}" == want["type"]
    assert str(info.value) == want["message"]
    notes = "\n".join(getattr(info.value, "__notes__", []))
    assert f"Remote traceback (kinetic job {job.job_id}" in notes
    assert want["message"] in notes and "raise_" in notes  # the job function's frame
    assert kc.failure_of(job).__class__ is kind
    described = kc.describe_failure(job, info.value)
    assert "FAILED" in described and want["message"] in described


def test_cancelled_job_has_no_result(old_store: OldStore) -> None:
    job = old_store.job("cancelled")
    with pytest.raises(kc.JobCancelled):
        job.result(timeout=10)
    assert job.cancel(wait=0) is False  # already decided: the outcome stays


def test_idempotency_key_returns_the_old_job(old_store: OldStore) -> None:
    want = old_store.jobs["idempotent"]
    again = kc.submit(_double, (5,), idempotency_key=want["idempotency_key"])
    assert again.job_id == want["job_id"]
    assert again.result(timeout=10) == want["result"] == 10


def test_batch_reads_progress_statuses_and_results(old_store: OldStore) -> None:
    want = old_store.batch
    batch = kc.attach_batch(want["group_id"])
    assert batch.total == want["total"] == 3
    assert [s.value for s in batch.statuses()] == want["statuses"]
    assert [j.job_id if j is not None else None for j in batch.jobs] == want["children"]
    last = list(batch.progress(timeout=30))[-1]
    assert last.done and last.total == 3
    assert {s.value: n for s, n in last.counts.items() if n} == {"SUCCEEDED": 2, "FAILED": 1}
    assert [s.value for s in batch.wait(timeout=30)] == want["statuses"]
    failed = batch.failed_children()
    assert [(f.index, f.reason) for f in failed] == [
        (int(i), f["reason"]) for i, f in want["failed"].items()
    ]
    with pytest.raises(kc.BatchError) as info:
        batch.results(timeout=30, cleanup=False)
    assert info.value.partial_results == want["results"] == [0, None, 4]
    assert [j.job_id for j in info.value.failures] == [want["children"][1]]
    assert want["failed"]["1"]["error"] in kc.describe_batch_failure(info.value)
    values = batch.results(timeout=30, return_exceptions=True, cleanup=False)
    assert values[0] == 0 and values[2] == 4
    assert type(values[1]) is ValueError and str(values[1]) == want["failed"]["1"]["error"]
    assert want["group_id"] in {b.group_id for b in kc.list_batches()}


def test_cli_lists_and_reads_the_old_store(
    old_store: OldStore, capsys: pytest.CaptureFixture[str]
) -> None:
    def run_json(argv: list[str]) -> tuple[int, Any]:
        code = main(["--storage", old_store.uri, *argv])
        return code, json.loads(capsys.readouterr().out)

    code, rows = run_json(["jobs", "list", "--json"])
    assert code == 0
    singles = {r["job_id"]: r["state"] for r in rows}  # --json: every row a job
    assert singles.keys() >= {j["job_id"] for j in old_store.jobs.values()}
    for want in old_store.jobs.values():
        assert singles[want["job_id"]]["status"] == want["status"]
        assert singles[want["job_id"]]["reason"] == want["reason"]
    code, batches = run_json(["batch", "list", "--json"])
    assert [b["group_id"] for b in batches] == [old_store.batch["group_id"]]
    code, rows = run_json(["jobs", "list", "--json", "--all"])
    assert code == 0 and {r["job_id"] for r in rows} == set(old_store.expected["listed"])
    failed = old_store.jobs["value_error"]["job_id"]
    code, status = run_json(["jobs", "status", failed, "--json"])
    assert code == 1 and status["state"]["status"] == "FAILED"
    code, result = run_json(["jobs", "result", old_store.jobs["idempotent"]["job_id"], "--json"])
    assert code == 0 and result["result"] == 10
    assert main(["--storage", old_store.uri, "jobs", "result", failed]) == 1
    err = capsys.readouterr().err
    assert "ValueError: learning rate too high" in err and "Remote traceback" in err


def test_envelopes_verify(old_store: OldStore) -> None:
    storage = open_storage(old_store.uri)
    checked = 0
    for job_dir in sorted((old_store.root / "jobs").iterdir()):
        job_id = job_dir.name
        for name, kind in ((layout.PAYLOAD, "call"), (layout.RESULT, "result")):
            if (job_dir / name).exists():
                header, body = load_envelope(
                    storage,
                    layout.job_file(job_id, name),
                    kind=kind,
                    job_id=job_id,
                    signing_key=None,
                )
                assert header["job_id"] == job_id and body is not None
                checked += 1
    assert checked >= 2 * len(old_store.jobs)


def _python(*args: str) -> subprocess.CompletedProcess[str]:
    """A fresh interpreter on this checkout: nothing imported before the old names."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "providers")])}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=60, env=env, cwd=REPO
    )


def test_old_pod_commands_run_the_new_modules() -> None:
    assert not (REPO / "kinetic_core" / "runner.py").exists()
    assert not (REPO / "kinetic_core" / "bootstrap.py").exists()
    runner = _python("-m", "kinetic_core.runner")
    assert runner.returncode == 2
    assert "usage: python -m kinetic_core.runtime.runner --storage URI --job-id ID" in runner.stderr
    boot = _python("-m", "kinetic_core.bootstrap", "-c", "print('bootstrapped')")
    assert boot.returncode == 0, boot.stderr
    assert boot.stdout.strip() == "bootstrapped"


def test_old_module_names_are_the_new_modules() -> None:
    import kinetic_core.batch.manifest
    import kinetic_core.records.envelope

    assert importlib.import_module("kinetic_core.payload") is kinetic_core.records.envelope
    assert importlib.import_module("kinetic_core.batch.records") is kinetic_core.batch.manifest
    fresh = _python(
        "-c",
        "import kinetic_core.payload, kinetic_core.batch.records, kinetic_core.records.envelope, "
        "kinetic_core.batch.manifest as m; import kinetic_core as k; "
        "print(k.payload is k.records.envelope, k.batch.records is m)",
    )
    assert fresh.returncode == 0, fresh.stderr
    assert fresh.stdout.split() == ["True", "True"]


def test_pickles_naming_old_modules_load() -> None:
    from kinetic_core.records.envelope import success_body

    raw = b"\x80\x04ckinetic_core.payload\nsuccess_body\n."  # what an old pickle names
    assert pickle.loads(raw) is success_body
    fresh = _python(
        "-c",
        f"import pickle; f = pickle.loads({raw!r}); print(f.__module__, f(1)['value'])",
    )
    assert fresh.returncode == 0, fresh.stderr
    assert fresh.stdout.split() == ["kinetic_core.records.envelope", "1"]
