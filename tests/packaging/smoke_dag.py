"""The smoke DAG run from the installed wheel: a @task.kinetic job on the local backend.

``SMOKE_OUT`` names the file the downstream task writes the job's value to.
"""

from __future__ import annotations

import os
from datetime import datetime

from airflow.sdk import DAG, task


def cube(x: int) -> int:
    print(f"cubing {x}", flush=True)
    return x**3


with DAG("kinetic_smoke", schedule=None, start_date=datetime(2026, 1, 1), catchup=False):

    @task.kinetic(poll_interval=0.5)
    def remote_cube(x: int) -> int:
        return cube(x)

    @task
    def record(value: int) -> None:
        with open(os.environ["SMOKE_OUT"], "w") as fh:
            fh.write(str(value))

    record(remote_cube(3))
