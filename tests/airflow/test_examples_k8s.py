"""End to end: the nightly DAG of ``make demo`` (the very file), with ``dag.test()``, on the
Kubernetes test cluster with gs:// storage on the GCS emulator, its ``train`` moved to a
multi-host TPU slice by an Airflow Variable only. Data moves only through
storage: the pods run in fresh folders with the manifest's environment."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from nightly_dag import check_nightly_outputs, run_nightly_dag

from kinetic_core.storage import open_storage

# Imported as a package, not by putting tests/kubernetes on sys.path: jobs inherit this
# process's sys.path, and its conftest.py would shadow this suite's for them.
from tests.kubernetes.cluster.cluster import TestCluster, run_examples_here, running_cluster


@pytest.fixture(scope="module")
def cluster(gcs_emulator: Any) -> Iterator[TestCluster]:
    with running_cluster() as test_cluster:
        yield test_cluster


@pytest.mark.timeout(900)
def test_nightly_dag_on_kubernetes_with_gcs_storage(
    cluster: TestCluster, gcs_emulator: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    uri = gcs_emulator.uri(f"af-k8s-{os.urandom(4).hex()}")
    run_examples_here(cluster, uri, monkeypatch, tmp_path)
    # By configuration only, train runs on a multi-host slice (4 hosts of a spot v5e 4x4).
    monkeypatch.setenv("AIRFLOW_VAR_NIGHTLY_TRAIN_ACCELERATOR", "tpu-v5e-16")
    run_nightly_dag()

    storage = open_storage(uri)
    registry_job, published = check_nightly_outputs(storage)
    train = json.loads(storage.read_bytes(f"jobs/{published['model_job']}/handle.json"))
    assert train["target"]["accelerator"] == "tpu-v5e-16"
    for worker in range(4):  # every worker of the slice ran, its log kept in storage
        assert storage.exists(f"jobs/{published['model_job']}/logs/worker-{worker}/stream.json")
    for job_id in (registry_job, published["model_job"]):  # they ran as pods
        handle = json.loads(storage.read_bytes(f"jobs/{job_id}/handle.json"))
        assert handle["target"]["backend"] == "kubernetes"
