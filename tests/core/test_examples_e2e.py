"""End to end: the example pipeline of ``make demo`` on the local backend with gs:// storage
(the GCS emulator, real client): the same file, data only through Data, output folders
and results."""

from __future__ import annotations

import importlib.util
import json
import os
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
