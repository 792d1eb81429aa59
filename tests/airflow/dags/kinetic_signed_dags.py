"""A DAG whose jobs are signed with a key given to the operators (tests/airflow/
test_signing_key_secrecy.py checks the key reaches no rendered field, XCom or log)."""

from __future__ import annotations

import hashlib
from datetime import datetime

from airflow.sdk import DAG, task
from kinetic_airflow import KineticOperator

import kinetic_core as kc

# Derived, not spelled out: Airflow stores and shows a DAG file's source (as a real DAG
# would read its key from a secret, not hold it in the file).
SIGNING_KEY = hashlib.sha256(b"kinetic airflow test signing key").hexdigest()
FAST = {"poll_interval": 1.0}


def add(a: int, b: int) -> dict:
    """The sum, and a digest of the key the job runs with (the runner refuses an unsigned
    payload when it has a key, so a matching digest proves the job ran signed)."""
    import hashlib
    import os

    key = os.environ.get("KINETIC_SIGNING_KEY", "")
    return {"sum": a + b, "key_sha256": hashlib.sha256(key.encode()).hexdigest()}


with DAG("kt_signed", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):
    KineticOperator(
        task_id="as_target",
        python_callable=add,
        op_args=[2, 3],
        target=kc.Target(signing_key=SIGNING_KEY, poll_interval=1.0),
    )
    KineticOperator(
        task_id="as_dict",
        python_callable=add,
        op_args=[4, 5],
        target={"signing_key": SIGNING_KEY, **FAST},
        deferrable=False,
    )

    @task.kinetic(target=kc.Target(signing_key=SIGNING_KEY, poll_interval=1.0))
    def decorated(x: int) -> dict:
        return add(x, 63)

    decorated(7)
    KineticOperator.partial(
        task_id="mapped", python_callable=add, target={"signing_key": SIGNING_KEY, **FAST}
    ).expand(op_args=[[10, 1], [20, 2]])
    decorated.expand(x=[8])
