"""End to end: the nightly Prefect flow of ``make demo`` (the very file) on the private Slurm
cluster of ``tests/slurm``, against the real Prefect server, selected by configuration only
(``KINETIC_BACKEND``, ``KINETIC_STORAGE``, ``KINETIC_PARTITION``; ``SLURM_CONF`` as on any
Slurm login node). Data moves only through the shared ``file://`` storage."""

from __future__ import annotations

import pytest
from nightly_flow import check_nightly_outputs, run_nightly_flow

from kinetic_core.storage import open_storage

# Imported as a package, not by putting tests/slurm on sys.path: jobs inherit this
# process's sys.path, and its conftest.py would shadow this suite's for them.
from tests.slurm.cluster import SlurmCluster
from tests.slurm.fixtures import check_ran_on_slurm, slurm_cluster, slurm_examples  # noqa: F401


@pytest.mark.timeout(900)
def test_nightly_flow_on_slurm(
    slurm_cluster: SlurmCluster,  # noqa: F811 (the imported fixture)
    slurm_examples: str,  # noqa: F811 (the imported fixture: the storage URI)
) -> None:
    uri = slurm_examples
    summary = run_nightly_flow()

    best = check_nightly_outputs(open_storage(uri), summary)
    job_ids = check_ran_on_slurm(slurm_cluster, uri)
    # prepare, two trains, two evaluates, the registry job (and a batch driver, if any)
    assert len(job_ids) >= 6 and best["model_job"] in job_ids, job_ids
