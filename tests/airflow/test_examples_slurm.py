"""End to end: the nightly DAG of ``make demo`` (the very file), with ``dag.test()``, on the
private Slurm cluster of ``tests/slurm``, selected by configuration only: ``KINETIC_BACKEND``,
``KINETIC_STORAGE`` and ``KINETIC_PARTITION`` (and ``SLURM_CONF``, as on any Slurm login
node). The DAG's accelerator options (a TPU slice for ``train``, an L4 for ``evaluate``) are
another backend's and are ignored here; ``life_span`` becomes Slurm's time limit. Data moves
only through the shared ``file://`` storage: every job runs in Slurm's own processes."""

from __future__ import annotations

import json

import pytest
from nightly_dag import check_nightly_outputs, run_nightly_dag

from kinetic_core.storage import open_storage

# Imported as a package, not by putting tests/slurm on sys.path: jobs inherit this
# process's sys.path, and its conftest.py would shadow this suite's for them.
from tests.slurm.cluster import SlurmCluster
from tests.slurm.fixtures import check_ran_on_slurm, slurm_cluster, slurm_examples  # noqa: F401


@pytest.mark.timeout(900)
def test_nightly_dag_on_slurm(
    slurm_cluster: SlurmCluster,  # noqa: F811 (the imported fixture)
    slurm_examples: str,  # noqa: F811 (the imported fixture: the storage URI)
) -> None:
    uri = slurm_examples
    run_nightly_dag()

    storage = open_storage(uri)
    registry_job, published = check_nightly_outputs(storage)
    job_ids = check_ran_on_slurm(slurm_cluster, uri)
    # prepare, train, evaluate and the registry job
    assert len(job_ids) == 4 and {registry_job, published["model_job"]} <= set(job_ids), job_ids
    train = json.loads(storage.read_bytes(f"jobs/{published['model_job']}/handle.json"))
    assert train["target"]["life_span"] == 3600  # Slurm's --time, with the grace signal
