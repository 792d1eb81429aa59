"""A real Airflow 3 (SQLite metadata DB in a temp AIRFLOW_HOME) for the provider tests.

Environment must be set before Airflow is imported, so it happens at import time here.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest

_HOME = Path(tempfile.mkdtemp(prefix="af-provider-tests-"))
DAGS = Path(__file__).parent / "dags"
STORAGE = _HOME / "kinetic"
os.environ.update(
    {
        "AIRFLOW_HOME": str(_HOME),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_HOME}/airflow.db",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "KINETIC_STORAGE": f"file://{STORAGE}",
    }
)
os.environ.pop("KINETIC_BACKEND", None)
os.environ.pop("KINETIC_SIGNING_KEY", None)


@pytest.fixture(scope="session", autouse=True)
def airflow_db() -> None:
    """``airflow db migrate`` once per session, programmatically."""
    from airflow.utils.db import initdb

    initdb()


def dag_bag(folder: Path) -> Any:
    """A DagBag of ``folder`` (its module moved in Airflow 3.2)."""
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:  # Airflow 3.0, 3.1
        from airflow.models.dagbag import DagBag
    return DagBag(dag_folder=str(folder))


def sync_to_db(bag: Any) -> None:
    """Write ``bag``'s DAGs to the metadata DB as the DAG processor would: a DagBag method
    on Airflow 3.0, a function in ``airflow.models.dagbag`` on 3.1, moved on 3.2."""
    if hasattr(bag, "sync_to_db"):  # Airflow 3.0
        bag.sync_to_db("dags-folder", None)
        return
    try:
        from airflow.dag_processing.dagbag import sync_bag_to_db
    except ImportError:  # Airflow 3.1
        from airflow.models.dagbag import sync_bag_to_db
    sync_bag_to_db(bag, "dags-folder", None)


@pytest.fixture(scope="session")
def dagbag(airflow_db: None) -> Any:
    bag = dag_bag(DAGS)
    assert not bag.import_errors, bag.import_errors
    return bag


@pytest.fixture
def storage() -> str:
    return os.environ["KINETIC_STORAGE"]


def count_jobs() -> int:
    jobs = STORAGE / "jobs"
    return len(list(jobs.iterdir())) if jobs.exists() else 0
