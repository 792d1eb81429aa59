"""DAGs for the kinetic provider tests. Callables live here on purpose: Airflow imports this
file under a generated module name, so they must travel to the job by value."""

from __future__ import annotations

import os
from datetime import datetime
from typing import Any

from airflow.sdk import DAG, Asset, task
from kinetic_airflow import KineticBatchOperator, KineticJobSensor, KineticOperator

START = datetime(2026, 1, 1)
FAST = {"poll_interval": 1.0}


def _double(x: int) -> int:
    """A DAG-file helper called by the remote function (also shipped by value)."""
    return 2 * x


def add(a: int, b: int) -> int:
    print(f"adding {a} and {b}")
    return _double(a + b) // 2


def explode(tag: str) -> None:
    print("about to fail", flush=True)
    raise ValueError(f"boom-{tag}")


def big_result(n: int) -> dict:
    out = os.environ.get("KINETIC_OUTPUT_DIR", "")
    return {"rows": list(range(n)), "output_dir": out}


def square(x: int) -> int:
    print(f"squaring {x}", flush=True)
    return x * x


with DAG("kt_value", schedule=None, start_date=START, catchup=False):
    KineticOperator(task_id="add", python_callable=add, op_args=[2, 3], target=FAST)

with DAG("kt_failure", schedule=None, start_date=START, catchup=False):
    KineticOperator(
        task_id="explode",
        python_callable=explode,
        op_kwargs={"tag": "{{ dag.dag_id }}"},
        target=FAST,
    )

with DAG("kt_reference", schedule=None, start_date=START, catchup=False):
    KineticOperator(
        task_id="big", python_callable=big_result, op_args=[1000], result="reference", target=FAST
    )

with DAG("kt_nondeferrable", schedule=None, start_date=START, catchup=False):
    KineticOperator(
        task_id="add", python_callable=add, op_args=[20, 22], deferrable=False, target=FAST
    )

with DAG("kt_decorator", schedule=None, start_date=START, catchup=False):

    @task
    def make_numbers() -> list[int]:
        return [1, 2, 3, 4]

    @task.kinetic(poll_interval=1.0, tags={"stage": "eval"})
    def evaluate(numbers: list[int], scale: int = 1) -> dict:
        return {"total": _double(sum(numbers)) * scale, "pid": os.getpid()}

    evaluate(make_numbers(), scale=10)

with DAG("kt_mapped", schedule=None, start_date=START, catchup=False):
    KineticOperator.partial(task_id="shard", python_callable=square, target=FAST).expand(
        op_args=[[0], [1], [2]]
    )

with DAG("kt_sensor", schedule=None, start_date=START, catchup=False):
    KineticJobSensor(
        task_id="wait",
        job_id="{{ params.job_id }}",
        collect_result=True,
        poll_interval=1.0,
        timeout=120,
        params={"job_id": "x00"},
    )

with DAG("kt_batch", schedule=None, start_date=START, catchup=False):
    KineticBatchOperator(
        task_id="sweep", python_callable=square, inputs=[1, 2, 3], max_concurrency=3, target=FAST
    )


def square_but_not_two(x: int) -> int:
    if x == 2:
        raise ValueError("two is not allowed")
    return x * x


with DAG("kt_batch_failure", schedule=None, start_date=START, catchup=False):
    KineticBatchOperator(
        task_id="sweep",
        python_callable=square_but_not_two,
        inputs=[1, 2, 3],
        max_concurrency=3,
        target=FAST,
        retries=0,
    )

with DAG("kt_sensor_poke", schedule=None, start_date=START, catchup=False):
    KineticJobSensor(
        task_id="wait",
        job_id="{{ params.job_id }}",
        deferrable=False,
        mode="poke",
        collect_result=True,
        poll_interval=0.5,
        timeout=120,
        params={"job_id": "x00"},
    )


MODEL = Asset("kinetic://tests/model", extra={"owner": "ml"})
REPORT = Asset("kinetic://tests/report")


def train_metrics(lr: float) -> dict:
    return {"r2": 0.93, "loss": lr / 10, "epochs": 3, "converged": True, "checkpoint": "m.json"}


with DAG("kt_asset", schedule=None, start_date=START, catchup=False):
    KineticOperator(
        task_id="train", python_callable=train_metrics, op_args=[0.5], outlets=[MODEL], target=FAST
    )

    @task.kinetic(poll_interval=1.0, outlets=[REPORT])
    def report() -> str:
        return "not a dict: no metrics"

    report()

with DAG("kt_asset_consumer", schedule=[MODEL], start_date=START, catchup=False):

    @task
    def deploy(triggering_asset_events: Any = None) -> float:
        event = triggering_asset_events[MODEL][-1]
        return float(event.extra["metrics"]["r2"])

    deploy()


def lost_once() -> str:
    """The first run checkpoints, then SIGKILLs its supervisor and runner (as if the
    machine restarted); the recovered attempt resumes from the checkpoint."""
    import signal

    workdir = os.environ["KT_RECOVERY_DIR"]
    checkpoint = os.path.join(workdir, "checkpoint")
    with open(os.path.join(workdir, "starts"), "a") as fh:
        fh.write(os.environ["KINETIC_JOB_ID"] + "\n")
    if not os.path.exists(checkpoint):
        with open(checkpoint, "w") as fh:
            fh.write("step 5")
        os.killpg(os.getpgrp(), signal.SIGKILL)
    with open(checkpoint) as fh:
        return f"resumed from {fh.read()}"


with DAG("kt_recovery", schedule=None, start_date=START, catchup=False):
    KineticOperator(
        task_id="train",
        python_callable=lost_once,
        target={**FAST, "max_recoveries": 1},
        retries=0,
    )
