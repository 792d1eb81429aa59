"""End to end: the nightly DAG of ``make demo`` (the very file), with ``dag.test()``, on the
private Slurm cluster of ``tests/slurm``, selected by configuration only: ``KINETIC_BACKEND``,
``KINETIC_STORAGE`` and ``KINETIC_PARTITION`` (and ``SLURM_CONF``, as on any Slurm login
node). The DAG's accelerator options (a TPU slice for ``train``, an L4 for ``evaluate``) are
another backend's and are ignored here; ``life_span`` becomes Slurm's time limit. Data moves
only through the shared ``file://`` storage: every job runs in Slurm's own processes."""

from __future__ import annotations

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
def test_nightly_dag_on_slurm(
    slurm_cluster: SlurmCluster,  # noqa: F811 (the imported fixture)
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    from conftest import dag_bag
    from test_dag_runs import register

    store = tmp_path / "shared"
    workdir = tmp_path / "work"
    workdir.mkdir()
    uri = f"file://{store}"
    run_examples_on_slurm(uri, monkeypatch, workdir)
    bag = dag_bag(ROOT / "dags_examples" / "nightly_training.py")
    assert not bag.import_errors, bag.import_errors
    register(bag, "nightly_training")
    dag_run = bag.get_dag("nightly_training").test()
    # A failed task does not raise in dag.test(): the states say how the run went.
    states = {ti.task_id: ti.state for ti in dag_run.get_task_instances()}
    assert dag_run.state == "success", states
    assert states == dict.fromkeys(
        ("prepare", "train", "evaluate", "publish", "report"), "success"
    ), states

    storage = open_storage(uri)
    outputs = storage.walk("outputs")
    assert any(name.endswith("/dataset.json") for name in outputs)  # prepare's outputs
    best = [name for name in outputs if name.endswith("/best.json")]
    assert len(best) == 1
    registry_job = best[0].split("/")[0]
    published = json.loads(storage.read_bytes(f"outputs/{best[0]}"))
    assert published["r2"] > 0.9
    model = json.loads(storage.read_bytes(f"outputs/{registry_job}/model.json"))
    trained = json.loads(storage.read_bytes(f"outputs/{published['model_job']}/model.json"))
    assert model == trained and model["epoch"] == 200

    jobs = sorted(name for name in storage.walk("jobs") if name.endswith("/handle.json"))
    job_ids = [name.split("/")[0] for name in jobs]
    assert len(job_ids) == 4, job_ids  # prepare, train, evaluate and the registry job
    assert {registry_job, published["model_job"]} <= set(job_ids)
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
    train = json.loads(storage.read_bytes(f"jobs/{published['model_job']}/handle.json"))
    assert train["target"]["life_span"] == 3600  # Slurm's --time, with the grace signal
