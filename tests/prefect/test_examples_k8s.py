"""End to end: the nightly Prefect flow of ``make demo`` (the very file) on the Kubernetes
test cluster with gs:// storage on the GCS emulator, against the real Prefect server."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nightly_flow import check_nightly_outputs, run_nightly_flow

from kinetic_core.storage import open_storage

# Imported as a package, not by putting tests/kubernetes on sys.path: jobs inherit this
# process's sys.path, and its conftest.py would shadow this suite's for them.
from tests.kubernetes.cluster.cluster import TestCluster, run_examples_here, running_cluster


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
    summary = run_nightly_flow()

    storage = open_storage(uri)
    best = check_nightly_outputs(storage, summary)
    handle = json.loads(storage.read_bytes(f"jobs/{best['model_job']}/handle.json"))
    assert handle["target"]["backend"] == "kubernetes"
