"""Fixtures of the Slurm tests: one private cluster per session (``fixtures.py``, which
other suites import too; the cluster itself: cluster.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

import kinetic_core as kc
from tests.slurm.cluster import SlurmCluster
from tests.slurm.fixtures import slurm_cluster  # noqa: F401 (the session's cluster)

FNS = "tests.slurm.slurm_fns"


@pytest.fixture
def slurm_target(
    slurm_cluster: SlurmCluster,  # noqa: F811 (the imported fixture)
    storage_uri: str,
    tmp_path: Path,
) -> kc.Target:
    """A target for the private cluster, its storage (and job folders) under tmp_path."""
    return kc.Target(backend="slurm", storage=storage_uri, pickle_by_value=[FNS], poll_interval=0.5)
