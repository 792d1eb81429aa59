"""End to end: the nightly Prefect flow of ``make demo`` (the very file) on the Kubernetes
test cluster with gs:// storage on the GCS emulator, against the real Prefect server."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kinetic_core.storage import open_storage

ROOT = Path(__file__).resolve().parents[2]
# Imported as a package, not by putting tests/kubernetes on sys.path: jobs inherit this
# process's sys.path, and its conftest.py would shadow this suite's for them.
from tests.kubernetes.cluster.cluster import TestCluster, run_examples_here, running_cluster  # noqa: E402


@pytest.fixture(scope="module")
def cluster(gcs_emulator: Any) -> Iterator[TestCluster]:
    with running_cluster() as test_cluster:
        yield test_cluster


@pytest.mark.timeout(900)
def test_nightly_flow_on_kubernetes_with_gcs_storage(
    cluster: TestCluster, gcs_emulator: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    uri = gcs_emulator.uri(f"pf-k8s-{os.urandom(4).hex()}")
    run_examples_here(cluster, uri, monkeypatch, tmp_path)
    spec = importlib.util.spec_from_file_location(
        "nightly_prefect_e2e", ROOT / "dags_examples" / "nightly_training_prefect.py"
    )
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    summary = asyncio.run(example.nightly_training(n_samples=400, lrs=(0.1, 0.3)))
    assert summary["registry"]["published"] is True

    storage = open_storage(uri)
    outputs = storage.walk("outputs")
    assert sum(name.endswith("/model.json") for name in outputs) == 3  # 2 trained + published
    best = json.loads(storage.read_bytes(f"outputs/{summary['registry']['job_id']}/best.json"))
    assert best["mse"] == summary["mse"] < 0.05
    handle = json.loads(storage.read_bytes(f"jobs/{best['model_job']}/handle.json"))
    assert handle["target"]["backend"] == "kubernetes"
