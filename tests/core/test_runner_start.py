"""A fresh runner (what a pod or a Slurm node starts: ``python -m kinetic_core.runtime.runner``)
imports only what the job needs before its function runs (issue 37): not the sidecar's
signal and telemetry machinery, not the job index; and before it writes ``started.json``,
not even ``typing``, ``dataclasses`` or ``pathlib``. Structural: which modules are loaded
at those points, not how long anything took (``bench/runner_start.py`` measures that)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.records import layout
from tests.core import jobfns, scripted_backend

ROOT = Path(__file__).resolve().parents[2]

#: Loaded only after the function started (the sidecar thread's first wake, or its stop()).
NOT_BEFORE_THE_FUNCTION = {
    "kinetic_core.runtime.signals",
    "kinetic_core.runtime.telemetry",
    "kinetic_core.records.job_index",
    "kinetic_core.storage.gcs",
}


#: Not loaded when the runner stages ``started.json``: the standard library a fresh
#: interpreter's start would otherwise pay for before the job counts as started.
NOT_BEFORE_STARTED = {
    "typing",
    "dataclasses",
    "inspect",
    "pathlib",
    "threading",
    "signal",
    "cloudpickle",
}

#: Not loaded when it stages ``outcome.json``: what a job whose outputs live in file://
#: storage itself does not need (``tempfile``: ``outputs.finish``'s local folder).
NOT_BEFORE_OUTCOME = {"tempfile", "kinetic_core.runtime.telemetry"}

#: Runs the runner as ``-m`` does, noting the modules loaded when it first opens a file
#: whose name holds $RECORD (``outcome.json.w``: storage stages a write under that name;
#: an audit hook on ``open``) into the file $SEEN names.
WATCH_RECORD = """
import os, sys, runpy
seen = []
def hook(event, args):
    if event == "open" and not seen and os.environ["RECORD"] in str(args[0]):
        seen.append(sorted(sys.modules))
        fd = os.open(os.environ["SEEN"], os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, "\\n".join(seen[0]).encode())
        os.close(fd)
sys.addaudithook(hook)
sys.argv[0] = "runner"
runpy.run_module("kinetic_core.runtime.runner", run_name="__main__", alter_sys=True)
"""


def _run_fresh(
    storage_uri: str, job_id: str, *, code: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    """The job's runner as its pod runs it: a fresh interpreter, stdout a pipe."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("KINETIC_")}
    argv = ["-m", "kinetic_core.runtime.runner", "--storage", storage_uri, "--job-id", job_id]
    if code is not None:
        argv[:2] = ["-c", code]
    return subprocess.run(
        [sys.executable, *argv],
        env={**base, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("tee", ["1", "0"])
def test_a_fresh_runner_calls_the_function_before_loading_the_sidecars_machinery(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch, tee: str
) -> None:
    """Before: ``import kinetic_core.runtime.runner`` loaded signals, telemetry and the job
    index (~50 ms of a ~90 ms import) before the runner wrote ``started.json``."""
    scripted_backend.register(monkeypatch)
    job = kc.submit(jobfns.loaded_modules, target={"backend": scripted_backend.NAME})
    run = _run_fresh(storage_uri, job.job_id, KINETIC_LOG_TO_STORAGE=tee)
    assert run.returncode == 0, run.stderr
    loaded = set(job.result(timeout=60, cleanup=False))
    assert "kinetic_core.records.lifecycle" in loaded  # the runner (`__main__`) called it
    assert loaded & NOT_BEFORE_THE_FUNCTION == set()
    # The sidecar still ran: its stop() left the job's one telemetry sample.
    root = Path(storage_uri.removeprefix("file://"))
    assert (root / layout.telemetry_record(job.job_id)).is_file()


def test_a_fresh_runner_writes_started_before_loading_typing_dataclasses_or_pathlib(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Before: ``kc.Worker`` and ``lifecycle.Evidence`` were dataclasses (``inspect``,
    ``ast``, ``dis``), storage's protocol and annotations imported ``typing``, file://
    storage ``pathlib``: ~25 ms of a fresh interpreter before ``started.json``."""
    scripted_backend.register(monkeypatch)
    job = kc.submit(jobfns.loaded_modules, target={"backend": scripted_backend.NAME})
    seen = tmp_path / "seen.txt"
    run = _run_fresh(
        storage_uri, job.job_id, code=WATCH_RECORD, RECORD="started.json.w", SEEN=str(seen)
    )
    assert run.returncode == 0, run.stderr
    at_started = set(seen.read_text().split("\n"))
    assert "kinetic_core.records.lifecycle" in at_started  # the hook saw the runner's write
    assert at_started & NOT_BEFORE_STARTED == set()
    # ...and the job ran once started: cloudpickle then loaded its function
    assert "cloudpickle" in job.result(timeout=60, cleanup=False)


def test_a_fresh_runner_decides_without_tempfile_or_its_telemetry_sampler(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Before: ``outputs.finish`` imported ``tempfile`` (and probed the temporary folder)
    to look for a local output folder that a job whose outputs live in file:// storage
    never makes, and the sidecar's last sample came before the outcome (~14 ms)."""
    scripted_backend.register(monkeypatch)
    job = kc.submit(jobfns.add, (1, 2), target={"backend": scripted_backend.NAME})
    seen = tmp_path / "seen.txt"
    run = _run_fresh(
        storage_uri, job.job_id, code=WATCH_RECORD, RECORD="outcome.json.w", SEEN=str(seen)
    )
    assert run.returncode == 0, run.stderr
    at_outcome = set(seen.read_text().split("\n"))
    assert "kinetic_core.records.envelope" in at_outcome  # the result was stored by then
    assert at_outcome & NOT_BEFORE_OUTCOME == set()
    assert job.result(timeout=60, cleanup=False) == 3
    root = Path(storage_uri.removeprefix("file://"))
    assert (root / layout.telemetry_record(job.job_id)).is_file()  # the sample came after


def test_a_fresh_runner_exits_with_what_an_exit_does_for_the_job(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The runner skips the interpreter's teardown (``runner.exit_now``), not what a job
    can observe of an exit: its non-daemon threads and thread pools finish, its
    ``atexit`` callbacks run, its last output is flushed, the exit code is the job's."""
    scripted_backend.register(monkeypatch)
    folder = tmp_path / "left"
    folder.mkdir()
    job = kc.submit(
        jobfns.leaves_work_for_exit, (str(folder),), target={"backend": scripted_backend.NAME}
    )
    run = _run_fresh(storage_uri, job.job_id)
    assert run.returncode == 0, run.stderr
    assert job.result(timeout=60, cleanup=False) == "returned"
    assert {p.name for p in folder.iterdir()} == {"thread", "pool", "atexit"}
    assert "printed-without-newline" in run.stdout


def test_a_local_job_exits_with_what_an_exit_does_for_the_job(tmp_path: Path) -> None:
    """The same on the local backend, whose runner a supervisor forks: before, it ended
    with ``os._exit`` at once (its threads killed, its ``atexit`` callbacks never run),
    unlike the same job in a pod or on a Slurm node."""
    folder = tmp_path / "left"
    folder.mkdir()
    job = kc.submit(jobfns.leaves_work_for_exit, (str(folder),))
    assert job.result(timeout=60) == "returned"  # the job reads ended once its processes are
    assert {p.name for p in folder.iterdir()} == {"thread", "pool", "atexit"}
