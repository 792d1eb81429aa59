"""DAGs of the ``log_workers`` option (a single-host job: worker 0 of 1, whichever is asked).
Callables live here on purpose: they travel to the job by value."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, task
from kinetic_airflow import KineticOperator

START = datetime(2026, 1, 1)
FAST = {"poll_interval": 1.0}


def say(word: str) -> str:
    print(f"saying {word}", flush=True)
    return word


with DAG("kt_log_workers", schedule=None, start_date=START, catchup=False):
    KineticOperator(
        task_id="all", python_callable=say, op_args=["all"], log_workers="all", target=FAST
    )
    KineticOperator(task_id="default", python_callable=say, op_args=["default"], target=FAST)

    @task.kinetic(log_workers=0, **FAST)
    def decorated() -> str:
        print("saying decorated", flush=True)
        return "decorated"

    decorated()
