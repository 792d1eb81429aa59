"""The private Slurm cluster as a pytest fixture, importable from any test session.

``tests/slurm/conftest.py`` uses it, and so do the suites with a conftest of their own
(``tests/airflow``, ``tests/prefect``), which import it into their test module: a conftest
outside a session's folders is not loaded. A cluster that cannot start FAILS the tests that
use it, never skips them: a silently skipped Slurm suite would hide exactly the regressions
it exists to catch.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.storage import open_storage
from tests.slurm.cluster import SlurmCluster, running_cluster


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """The session's private cluster; ``SLURM_CONF`` names it for this process and every
    process it starts (jobs, submitters)."""
    with running_cluster() as cluster, pytest.MonkeyPatch.context() as mp:
        for name, value in cluster.env.items():
            mp.setenv(name, value)
        yield cluster


@pytest.fixture
def slurm_examples(
    slurm_cluster: SlurmCluster, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> str:
    """Point this process at the private cluster (``SLURM_CONF``, set by ``slurm_cluster``)
    and a fresh shared ``file://`` storage by ``KINETIC_*`` variables only, as a deployment
    would configure the examples of ``dags_examples/``, from an empty working folder, with
    a fresh model-registry key; the storage URI."""
    uri = f"file://{tmp_path / 'shared'}"
    env = {
        "KINETIC_BACKEND": "slurm",
        "KINETIC_STORAGE": uri,
        "KINETIC_PARTITION": "main",
        "KINETIC_POLL_INTERVAL": "0.5",
        "NIGHTLY_REGISTRY_KEY": f"reg-{tmp_path.name}",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    return uri


def check_ran_on_slurm(cluster: SlurmCluster, storage_uri: str) -> list[str]:
    """Every job in ``storage_uri`` ran as a Slurm job of the partition the configuration
    named, and succeeded; their ids. Slurm's record of each (named after the job id) has
    ended COMPLETED (``result()``'s cleanup lets a job that ran to its end exit by itself)."""
    storage = open_storage(storage_uri)
    names = storage.walk("jobs")
    job_ids = sorted(name.split("/")[0] for name in names if name.endswith("/handle.json"))
    out = cluster.run("squeue", "-h", "-t", "all", "-o", "%j %T")
    slurm_jobs = dict(line.split(None, 1) for line in out.splitlines())
    for job_id in job_ids:
        handle = json.loads(storage.read_bytes(f"jobs/{job_id}/handle.json"))
        assert handle["target"]["backend"] == "slurm", handle["target"]
        assert handle["target"]["partition"] == "main", handle["target"]
        assert slurm_jobs.get(f"kinetic-{job_id}") == "COMPLETED", slurm_jobs
        state = kc.attach(job_id, target={"storage": storage_uri}).state()
        assert state.status is kc.JobStatus.SUCCEEDED, state
    return job_ids
