"""Nightly training on Airflow 3 with kinetic: prepare -> train -> evaluate -> publish -> report.

The heavy steps run as detached kinetic jobs: on the embedded default (local backend,
``file://~/.kinetic`` or ``KINETIC_STORAGE``) they are local processes; on GKE the same DAG
runs them on TPUs/GPUs by changing the ``kinetic_default`` connection only, and ``train``
moves to a multi-host slice by setting the Airflow Variable ``nightly_train_accelerator``
(``tpu-v5e-16``: 4 hosts, every worker runs ``train_model``, worker 0's result). The worker
slot is released while each job runs (deferrable), and retries reattach to running jobs.

Data moves only through storage: each job writes files into its output folder
(``KINETIC_OUTPUT_DIR``) and returns a small reference to it; the next job downloads that
folder. The best model so far lives in storage too: ``publish`` runs one job per DAG run
under a fixed idempotency key, and each new attempt of that key starts with the previous
attempt's output folder (best.json and the published model). ``report`` runs after every
run, published or not.

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

#: One idempotency key for the model registry: attempt N+1 inherits attempt N's outputs.
REGISTRY_KEY = os.environ.get("NIGHTLY_REGISTRY_KEY", "nightly_training/registry")


def job_ref(**extra: Any) -> dict[str, Any]:
    """This job's result by reference: where the next job finds its output folder."""
    return {
        "job_id": os.environ["KINETIC_JOB_ID"],
        "storage": os.environ["KINETIC_JOB_STORAGE"],
        **extra,
    }


def fetch_outputs(ref: dict[str, Any]) -> str:
    """Download another job's output folder (inside a job); return the local folder."""
    import tempfile

    import kinetic_core as kc

    handle = kc.attach(ref["job_id"], target={"storage": ref["storage"]})
    return handle.download_outputs(tempfile.mkdtemp(prefix="kinetic-in-"))


def prepare_data(n: int, seed: int) -> dict[str, Any]:
    """Write a small synthetic regression dataset (y = 3x + 2 + noise) to the output folder."""
    rng = random.Random(seed)
    rows = [(x, 3.0 * x + 2.0 + rng.gauss(0, 0.3)) for x in (rng.uniform(-2, 2) for _ in range(n))]
    path = os.path.join(os.environ["KINETIC_OUTPUT_DIR"], "dataset.json")
    with open(path, "w") as fh:
        json.dump({"train": rows[: int(n * 0.8)], "test": rows[int(n * 0.8) :]}, fh)
    print(f"wrote {n} rows to {path}")
    return job_ref(rows=n)


def train_model(prepared: dict[str, Any], epochs: int, lr: float) -> dict[str, Any]:
    """Fit y = w*x + b by gradient descent (pure Python), resuming from the checkpoint an
    earlier attempt left in the output folder."""
    with open(os.path.join(fetch_outputs(prepared), "dataset.json")) as fh:
        train = json.load(fh)["train"]
    ckpt = os.path.join(os.environ["KINETIC_OUTPUT_DIR"], "model.json")
    model = {"w": 0.0, "b": 0.0, "epoch": 0}
    if os.path.exists(ckpt):
        with open(ckpt) as fh:
            model = json.load(fh)
        print(f"resuming from epoch {model['epoch']}")
    loss = float("nan")
    for epoch in range(int(model["epoch"]), epochs):
        gw = gb = loss = 0.0
        for x, y in train:
            err = model["w"] * x + model["b"] - y
            gw, gb, loss = gw + 2 * err * x, gb + 2 * err, loss + err * err
        model["w"] -= lr * gw / len(train)
        model["b"] -= lr * gb / len(train)
        model["epoch"] = epoch + 1
        if epoch % 20 == 0 or epoch == epochs - 1:
            with open(ckpt + ".tmp", "w") as fh:
                json.dump(model, fh)
            os.replace(ckpt + ".tmp", ckpt)
            print(f"epoch {epoch:3d}  mse={loss / len(train):.4f}", flush=True)
    return job_ref(train_mse=loss / len(train))


def evaluate_model(prepared: dict[str, Any], trained: dict[str, Any]) -> dict[str, Any]:
    """Held-out R^2 of the trained model."""
    with open(os.path.join(fetch_outputs(trained), "model.json")) as fh:
        params = json.load(fh)
    with open(os.path.join(fetch_outputs(prepared), "dataset.json")) as fh:
        test = json.load(fh)["test"]
    mean = sum(y for _, y in test) / len(test)
    ss_res = sum((params["w"] * x + params["b"] - y) ** 2 for x, y in test)
    ss_tot = sum((y - mean) ** 2 for _, y in test)
    return {"r2": 1 - ss_res / ss_tot, "model": trained}


def update_registry(metrics: dict[str, Any]) -> dict[str, Any]:
    """The registry job: its output folder starts as the previous attempt's (best.json and
    the published model); publish this model there if it beats the best."""
    import shutil

    out = os.environ["KINETIC_OUTPUT_DIR"]
    best_path = os.path.join(out, "best.json")
    best = float("-inf")
    if os.path.exists(best_path):
        with open(best_path) as fh:
            best = float(json.load(fh)["r2"])
    published = metrics["r2"] > best
    if published:
        shutil.copyfile(
            os.path.join(fetch_outputs(metrics["model"]), "model.json"),
            os.path.join(out, "model.json"),
        )
        with open(best_path, "w") as fh:
            json.dump({"r2": metrics["r2"], "model_job": metrics["model"]["job_id"]}, fh)
    if published:
        print(f"published this model: r2={metrics['r2']:.4f} beats the best so far ({best:.4f})")
    else:
        print(f"kept the published model: r2={metrics['r2']:.4f} does not beat {best:.4f}")
    return job_ref(published=published, best_r2=max(best, metrics["r2"]))


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
        op_kwargs={"prepared": prepare.output, "epochs": 200, "lr": 0.1},
        target={
            "accelerator": "{{ var.value.get('nightly_train_accelerator', 'tpu-v5e-8') }}",
            "spot": True,
            "life_span": 3600,
        },
        poll_interval=2,
        execution_timeout=timedelta(hours=2),
    )

    @task.kinetic(accelerator="gpu-l4", poll_interval=2)
    def evaluate(prepared: dict[str, Any], trained: dict[str, Any]) -> dict[str, Any]:
        """Held-out R^2 of the checkpoint (runs remotely)."""
        return evaluate_model(prepared, trained)

    @task
    def publish(metrics: dict[str, Any]) -> dict[str, Any]:
        """Run the registry job (one attempt per DAG run, same key: it inherits the best)."""
        from kinetic_airflow import KineticHook

        import kinetic_core as kc

        job = kc.submit(
            update_registry,
            (metrics,),
            target=KineticHook().get_target(),
            idempotency_key=REGISTRY_KEY,
            name="registry",
        )
        return dict(job.result(timeout=600))

    @task(trigger_rule="all_done")
    def report(ti: Any = None) -> dict[str, Any]:
        """Print job ids, states, metrics and the registry (what `make demo` shows), after
        every run, even if a step failed."""
        import kinetic_core as kc

        metrics = ti.xcom_pull(task_ids="evaluate")
        registry = ti.xcom_pull(task_ids="publish")
        summary: dict[str, Any] = {"metrics": metrics, "registry": registry, "jobs": {}}
        for task_id in ("prepare", "train", "evaluate"):
            job_id = ti.xcom_pull(task_ids=task_id, key="job_id")
            state = kc.attach(job_id).state() if job_id else None
            summary["jobs"][task_id] = {
                "job_id": job_id,
                "status": state.status.value if state else None,
            }
            print(f"{task_id:9s} job={job_id} status={summary['jobs'][task_id]['status']}")
        print(f"metrics: {metrics}")
        print(f"registry: {registry}")
        return summary

    metrics = evaluate(prepare.output, train.output)
    published = publish(metrics)
    [metrics, published] >> report()
