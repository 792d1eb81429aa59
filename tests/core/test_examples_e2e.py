"""End to end: the example pipeline of ``make demo`` on the local backend with gs:// storage
(the GCS emulator, real client): the same file, data only through Data, output folders
and results."""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.storage import open_storage

EXAMPLE = Path(__file__).resolve().parents[2] / "dags_examples" / "demo_core.py"


def test_core_demo_on_gcs_storage(
    gcs_emulator: object, storage_uri: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    uri = f"gs://kinetic-test/demo-{os.urandom(4).hex()}"
    monkeypatch.setenv("KINETIC_STORAGE", uri)
    monkeypatch.chdir(tmp_path)  # the jobs must not need the submitter's working directory
    spec = importlib.util.spec_from_file_location("demo_core_e2e", EXAMPLE)
    assert spec is not None and spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    metrics = demo.main()
    assert metrics["mse"] < 0.01
    storage = open_storage(uri)
    models = [name for name in storage.walk("outputs") if name.endswith("/model.json")]
    assert len(models) == 1
    model = json.loads(storage.read_bytes(f"outputs/{models[0]}"))
    assert model["epoch"] == 20 and abs(model["w"] - 3) < 0.2
    manifests = [n for n in storage.list_names("data") if n.endswith(".json")]
    listed = [json.loads(storage.read_bytes(f"data/{n}"))["files"] for n in manifests]
    assert {"train.json", "test.json"} in [set(files) for files in listed]  # sent as Data
    train_job = kc.attach(models[0].split("/")[0], target={"storage": uri})
    got = Path(train_job.download_outputs(tmp_path / "model"))
    assert json.loads((got / "model.json").read_text()) == model


def test_the_demo_ends_with_a_summary_whose_next_commands_work(
    storage_uri: str, tmp_path: Path
) -> None:
    """Issue 35 item 8: ``make demo`` ended under Airflow's log lines suggesting
    ``kinetic jobs list``, which is not on PATH after ``make demo``. The summary says what
    ran where, and its commands work as printed (from the checkout)."""
    root = EXAMPLE.parents[1]
    env = {**os.environ, "KINETIC_STORAGE": storage_uri}
    run = subprocess.run(
        [sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    summary = subprocess.run(
        [sys.executable, str(root / "dags_examples" / "demo_summary.py")],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert summary.returncode == 0, summary.stderr
    out = summary.stdout
    assert "kinetic_core script (demo_core.py): train SUCCEEDED, evaluate SUCCEEDED" in out, out
    assert "2 jobs, 0 failed." in out
    commands = [line.strip() for line in out.splitlines() if ".venv/bin/kinetic jobs" in line]
    assert len(commands) == 3, out
    kinetic = Path(sys.executable).parent / "kinetic"  # this environment's, as .venv/bin's
    for command in commands:
        argv = shlex.split(command.replace(".venv/bin/kinetic", shlex.quote(str(kinetic))))
        assignment, *argv = argv
        name, _, value = assignment.partition("=")
        done = subprocess.run(
            argv, env={**os.environ, name: value}, cwd=root, capture_output=True, text=True
        )
        assert done.returncode == 0, (command, done.stderr)
