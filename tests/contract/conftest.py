"""Fixtures of the backend contract: ``harness`` runs each case once per backend.

The Kubernetes cluster is started here, as the examples' end-to-end suites do
(``running_cluster``, imported as a package: jobs inherit this process's sys.path, and
putting tests/kubernetes on it would shadow this conftest for them). It starts only when
a Kubernetes case runs, once per module, after the GCS emulator.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest

from tests.contract.harness import Harness
from tests.contract.harnesses import HARNESSES
from tests.contract.tcp_proxy import TcpProxy
from tests.kubernetes.cluster.cluster import TestCluster, running_cluster
from tests.slurm.cluster import SlurmCluster
from tests.slurm.cluster import running_cluster as running_slurm


@pytest.fixture(scope="module")
def k8s_cluster(gcs_emulator: object) -> Iterator[TestCluster]:
    with running_cluster() as cluster:
        yield cluster


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """The private Slurm cluster (tests/slurm/cluster.py): started when a Slurm case runs."""
    with running_slurm() as cluster:
        yield cluster


@pytest.fixture(scope="module")
def api_proxy(k8s_cluster: TestCluster) -> Iterator[TcpProxy]:
    """A TCP pass-through proxy in front of the cluster's API server."""
    server = urlparse(k8s_cluster.server)
    proxy = TcpProxy((server.hostname or "127.0.0.1", server.port or 443))
    try:
        yield proxy
    finally:
        proxy.close()


@pytest.fixture(params=list(HARNESSES))
def harness(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Harness]:
    made = HARNESSES[request.param](request, tmp_path, monkeypatch)
    try:
        yield made
    finally:
        made.cleanup()
