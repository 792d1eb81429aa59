"""The nightly DAG of ``make demo`` (``dags_examples/nightly_training.py``, the very file) run
with ``dag.test()``, and what a successful run leaves in storage: shared by the tests that
run it on a cluster by configuration only (``test_examples_k8s.py``,
``test_examples_slurm.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TASKS = ("prepare", "train", "evaluate", "publish", "report")


def run_nightly_dag() -> None:
    """Run the DAG once; every task must succeed (``report`` too: nothing short-circuits)."""
    from conftest import dag_bag
    from test_dag_runs import register

    bag = dag_bag(ROOT / "dags_examples" / "nightly_training.py")
    assert not bag.import_errors, bag.import_errors
    register(bag, "nightly_training")
    dag_run = bag.get_dag("nightly_training").test()
    # A failed task does not raise in dag.test(): the states say how the run went.
    states = {ti.task_id: ti.state for ti in dag_run.get_task_instances()}
    assert dag_run.state == "success", states
    assert states == dict.fromkeys(TASKS, "success"), states


def check_nightly_outputs(storage: Any) -> tuple[str, dict[str, Any]]:
    """What the run left in ``storage`` (data moved only through it): the dataset, one
    registry holding the trained model; the registry job's id and what it published."""
    outputs = storage.walk("outputs")
    assert any(name.endswith("/dataset.json") for name in outputs)  # prepare's outputs
    best = [name for name in outputs if name.endswith("/best.json")]
    assert len(best) == 1
    registry_job = best[0].split("/")[0]
    published: dict[str, Any] = json.loads(storage.read_bytes(f"outputs/{best[0]}"))
    assert published["r2"] > 0.9
    model = json.loads(storage.read_bytes(f"outputs/{registry_job}/model.json"))
    trained = json.loads(storage.read_bytes(f"outputs/{published['model_job']}/model.json"))
    assert model == trained and model["epoch"] == 200
    return registry_job, published
