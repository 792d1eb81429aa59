"""A DAG whose connection carries a kubeconfig's content (tests/airflow/
test_kubeconfig_secrecy.py checks it reaches no rendered field, XCom, log or handle)."""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG
from kinetic_airflow import KineticOperator


def add(a: int, b: int) -> int:
    return a + b


with DAG("kt_kubeconfig", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    KineticOperator(
        task_id="with_kubeconfig_content",
        python_callable=add,
        op_args=[20, 22],
        kinetic_conn_id="kinetic_kubeconfig",
        target={"poll_interval": 1.0},
    )
