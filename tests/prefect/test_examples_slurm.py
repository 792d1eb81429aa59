"""End to end: the nightly Prefect flow of ``make demo`` (the very file) on the private Slurm
cluster of ``tests/slurm``, against the real Prefect server, selected by configuration only
(``KINETIC_BACKEND``, ``KINETIC_STORAGE``, ``KINETIC_PARTITION``; ``SLURM_CONF`` as on any
Slurm login node). Data moves only through the shared ``file://`` storage."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.storage import open_storage

ROOT = Path(__file__).resolve().parents[2]
# Imported as a package, not by putting tests/slurm on sys.path: jobs inherit this
# process's sys.path, and its conftest.py would shadow this suite's for them.
from tests.slurm.cluster import SlurmCluster  # noqa: E402
from tests.slurm.fixtures import run_examples_on_slurm, slurm_cluster  # noqa: E402, F401


@pytest.mark.timeout(900)
def test_nightly_flow_on_slurm(
    slurm_cluster: SlurmCluster,  # noqa: F811 (the imported fixture)
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    store = tmp_path / "shared"
    workdir = tmp_path / "work"
    workdir.mkdir()
    uri = f"file://{store}"
    run_examples_on_slurm(uri, monkeypatch, workdir)
    spec = importlib.util.spec_from_file_location(
        "nightly_prefect_slurm", ROOT / "dags_examples" / "nightly_training_prefect.py"
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

    job_ids = sorted(n.split("/")[0] for n in storage.walk("jobs") if n.endswith("/handle.json"))
    # prepare, two trains, two evaluates, the registry job (and a batch driver, if any)
    assert len(job_ids) >= 6, job_ids
    # Slurm ran each of them: its record of the job (named after the job id) has ended. A job
    # collected by result() (the registry job) may read CANCELLED there: its cleanup runs
    # scancel while the batch job is still exiting after the runner recorded the value.
    slurm_jobs = dict(
        line.split(None, 1)
        for line in slurm_cluster.run("squeue", "-h", "-t", "all", "-o", "%j %T").splitlines()
    )
    for job_id in job_ids:
        handle = json.loads(storage.read_bytes(f"jobs/{job_id}/handle.json"))
        assert handle["target"]["backend"] == "slurm"
        assert handle["target"]["partition"] == "main"
        assert slurm_jobs.get(f"kinetic-{job_id}") in ("COMPLETED", "CANCELLED"), slurm_jobs
        assert kc.attach(job_id, target={"storage": uri}).state().status is kc.JobStatus.SUCCEEDED
