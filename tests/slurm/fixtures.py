"""The private Slurm cluster as a pytest fixture, importable from any test session.

``tests/slurm/conftest.py`` uses it, and so do the suites with a conftest of their own
(``tests/airflow``, ``tests/prefect``), which import it into their test module: a conftest
outside a session's folders is not loaded. A cluster that cannot start FAILS the tests that
use it, never skips them: a silently skipped Slurm suite would hide exactly the regressions
it exists to catch.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.slurm.cluster import SlurmCluster, running_cluster


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """The session's private cluster; ``SLURM_CONF`` names it for this process and every
    process it starts (jobs, submitters)."""
    with running_cluster() as cluster, pytest.MonkeyPatch.context() as mp:
        for name, value in cluster.env.items():
            mp.setenv(name, value)
        yield cluster


def run_examples_on_slurm(storage_uri: str, monkeypatch: pytest.MonkeyPatch, workdir: Path) -> None:
    """Point this process at the private cluster (``slurm_cluster`` set ``SLURM_CONF``) and
    ``storage_uri`` by ``KINETIC_*`` variables only, as a deployment would configure the
    examples of ``dags_examples/``, from an empty working folder, with a fresh model-registry
    key."""
    env = {
        "KINETIC_BACKEND": "slurm",
        "KINETIC_STORAGE": storage_uri,
        "KINETIC_PARTITION": "main",
        "KINETIC_POLL_INTERVAL": "0.5",
        "NIGHTLY_REGISTRY_KEY": f"reg-{workdir.name}",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(workdir)
