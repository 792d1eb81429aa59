"""Nightly training on Airflow 3 with kinetic: prepare -> train -> evaluate -> publish if better.

The heavy steps run as detached kinetic jobs: on the embedded default (local backend,
``file://~/.kinetic`` or ``KINETIC_STORAGE``) they are local processes; on GKE the same DAG
runs them on TPUs/GPUs by changing the ``kinetic_default`` connection only. The worker
slot is released while each job runs (deferrable), and retries reattach to running jobs.

Run it once, locally::

    AIRFLOW__CORE__DAGS_FOLDER=dags_examples airflow dags test nightly_training
"""

from __future__ import annotations

import json
import os
import random
from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG, task
from kinetic_airflow import KineticOperator

BEST_FILE_ENV = "KINETIC_DEMO_BEST"  # where the best metric so far is kept (JSON)


def _output_dir() -> str:
    """The job's own output folder (KINETIC_OUTPUT_DIR is set by the kinetic runner)."""
    path = os.environ.get("KINETIC_OUTPUT_DIR") or os.path.join(os.getcwd(), "outputs")
    os.makedirs(path, exist_ok=True)
    return path


def prepare_data(n: int, seed: int) -> str:
    """Write a small synthetic regression dataset (y = 3x + 2 + noise); return its path."""
    rng = random.Random(seed)
    rows = [(x, 3.0 * x + 2.0 + rng.gauss(0, 0.3)) for x in (rng.uniform(-2, 2) for _ in range(n))]
    path = os.path.join(_output_dir(), "dataset.json")
    with open(path, "w") as fh:
        json.dump({"train": rows[: int(n * 0.8)], "test": rows[int(n * 0.8) :]}, fh)
    print(f"wrote {n} rows to {path}")
    return path


def train_model(dataset: str, epochs: int, lr: float) -> dict[str, Any]:
    """Fit y = w*x + b by gradient descent (pure Python); write a checkpoint."""
    with open(dataset) as fh:
        train = json.load(fh)["train"]
    w = b = 0.0
    loss = float("inf")
    for epoch in range(epochs):
        gw = gb = loss = 0.0
        for x, y in train:
            err = w * x + b - y
            gw, gb, loss = gw + 2 * err * x, gb + 2 * err, loss + err * err
        w, b = w - lr * gw / len(train), b - lr * gb / len(train)
        if epoch % 20 == 0 or epoch == epochs - 1:
            print(
                f"epoch {epoch:3d}  mse={loss / len(train):.4f}  w={w:.3f}  b={b:.3f}", flush=True
            )
    checkpoint = os.path.join(_output_dir(), "model.json")
    with open(checkpoint, "w") as fh:
        json.dump({"w": w, "b": b}, fh)
    return {"checkpoint": checkpoint, "dataset": dataset, "train_mse": loss / len(train)}


def _read_best(path: str) -> float:
    try:
        with open(path) as fh:
            return float(json.load(fh)["r2"])
    except (FileNotFoundError, ValueError, KeyError):
        return float("-inf")


def best_file() -> str:
    default = os.path.join(os.path.expanduser("~"), ".kinetic", "nightly_training_best.json")
    return os.environ.get(BEST_FILE_ENV, default)


with DAG(
    dag_id="nightly_training",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    default_args={"retries": 2, "retry_delay": timedelta(seconds=10)},
    tags=["kinetic", "example"],
    doc_md=__doc__,
) as dag:
    prepare = KineticOperator(
        task_id="prepare",
        python_callable=prepare_data,
        op_kwargs={"n": 400, "seed": "{{ ds_nodash[-4:] | int }}"},
        poll_interval=2,
    )

    train = KineticOperator(
        task_id="train",
        python_callable=train_model,
        op_kwargs={"dataset": prepare.output, "epochs": 200, "lr": 0.1},
        target={"accelerator": "tpu-v5e-8", "spot": True, "life_span": 3600},
        poll_interval=2,
        execution_timeout=timedelta(hours=2),
    )

    @task.kinetic(accelerator="gpu-l4", poll_interval=2)
    def evaluate(model: dict[str, Any]) -> dict[str, Any]:
        """Held-out R^2 of the checkpoint (runs remotely)."""
        with open(model["checkpoint"]) as fh:
            params = json.load(fh)
        with open(model["dataset"]) as fh:
            test = json.load(fh)["test"]
        mean = sum(y for _, y in test) / len(test)
        ss_res = sum((params["w"] * x + params["b"] - y) ** 2 for x, y in test)
        ss_tot = sum((y - mean) ** 2 for _, y in test)
        return {"r2": 1 - ss_res / ss_tot, "checkpoint": model["checkpoint"]}

    @task.short_circuit
    def beats_best(metrics: dict[str, Any]) -> bool:
        best = _read_best(best_file())
        print(f"r2={metrics['r2']:.4f} best so far={best:.4f}")
        return bool(metrics["r2"] > best)

    @task
    def publish(metrics: dict[str, Any]) -> str:
        path = best_file()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as fh:
            json.dump({"r2": metrics["r2"], "checkpoint": metrics["checkpoint"]}, fh)
        print(f"published {metrics['checkpoint']} (r2={metrics['r2']:.4f}) -> {path}")
        return metrics["checkpoint"]

    @task(trigger_rule="all_done")
    def report(ti: Any = None) -> dict[str, Any]:
        """Print job ids, states and metrics (what `make demo` shows), even if a step failed."""
        import kinetic_core as kc

        metrics = ti.xcom_pull(task_ids="evaluate")
        summary: dict[str, Any] = {"metrics": metrics, "jobs": {}}
        for task_id in ("prepare", "train", "evaluate"):
            job_id = ti.xcom_pull(task_ids=task_id, key="job_id")
            state = kc.attach(job_id).state() if job_id else None
            summary["jobs"][task_id] = {
                "job_id": job_id,
                "status": state.status.value if state else None,
            }
            print(f"{task_id:9s} job={job_id} status={summary['jobs'][task_id]['status']}")
        print(f"metrics: {metrics}")
        return summary

    metrics = evaluate(train.output)
    gate = beats_best(metrics)
    published = publish(metrics)
    gate >> published
    [metrics, published] >> report()
