"""Fixtures of the Slurm tests: one private cluster per session (see cluster.py).

A cluster that cannot start FAILS the tests that use it, never skips them: a silently
skipped Slurm suite would hide exactly the regressions it exists to catch.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import kinetic_core as kc
from tests.slurm.cluster import SlurmCluster, running_cluster

FNS = "tests.slurm.slurm_fns"


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """The session's private cluster; ``SLURM_CONF`` names it for this process and every
    process it starts (jobs, submitters)."""
    with running_cluster() as cluster, pytest.MonkeyPatch.context() as mp:
        for name, value in cluster.env.items():
            mp.setenv(name, value)
        yield cluster


@pytest.fixture
def slurm_target(slurm_cluster: SlurmCluster, storage_uri: str, tmp_path: Path) -> kc.Target:
    """A target for the private cluster, its storage (and job folders) under tmp_path."""
    return kc.Target(backend="slurm", storage=storage_uri, pickle_by_value=[FNS], poll_interval=0.5)
