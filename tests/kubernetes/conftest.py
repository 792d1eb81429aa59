"""Fixtures for tests that need a real Kubernetes API: see cluster/cluster.py for what runs.

The cluster is session-scoped because starting it costs seconds (and the first build of its
binaries minutes). A failing build or start FAILS the tests that use it, never skips them:
a silently skipped Kubernetes suite would hide exactly the regressions it exists to catch.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

import kinetic_core as kc

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster.cluster import (
    CONTEXT,
    ClusterError,
    TestCluster,
    binaries_present,
    ensure_built,
)

# The first build compiles Kubernetes from source (tens of minutes on 2 cores); the default
# per-test timeout (300 s) would kill it. Building ahead with build.sh (as the Makefile does)
# makes this a no-op.
BUILD_TIMEOUT_S = 3600
_start_report: list[str] = []


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give the first cluster test room for the one-off build (session setup runs in it)."""
    if binaries_present():
        return
    for item in items:
        if "k8s_cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.timeout(BUILD_TIMEOUT_S + 300))
            return


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Show the cluster start time even without -s (output of passing tests is hidden)."""
    for line in _start_report:
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def k8s_cluster(gcs_emulator: object) -> Iterator[TestCluster]:
    """A running cluster (etcd, apiserver, controller-manager, scheduler, node agent).

    Starts after the GCS emulator so the node agent (and so every pod) can reach it.
    """
    failure = ""
    try:
        ensure_built(timeout=BUILD_TIMEOUT_S)
        cluster = TestCluster()
        cluster.start()
    except ClusterError as exc:
        failure = str(exc)
    if failure:
        pytest.fail(f"Kubernetes test cluster unavailable: {failure}", pytrace=False)
    report = f"kinetic test cluster started in {cluster.start_seconds:.1f}s at {cluster.server}"
    _start_report.append(report)
    print(f"\n{report}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def k8s_api_client(k8s_cluster: TestCluster) -> Iterator[client.ApiClient]:
    """A kubernetes ApiClient configured from the cluster's kubeconfig (context kinetic-test)."""
    api_client = config.new_client_from_config(
        config_file=str(k8s_cluster.kubeconfig_path), context=CONTEXT
    )
    try:
        yield api_client
    finally:
        api_client.close()


@pytest.fixture
def kube(
    k8s_cluster: TestCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[kc.Target]:
    """A target on the test cluster with file:// storage the node agent's processes can read."""
    monkeypatch.setenv("KUBECONFIG", str(k8s_cluster.kubeconfig_path))
    store = tmp_path / "store"
    monkeypatch.setenv("KINETIC_STORAGE", f"file://{store}")
    yield kc.Target(
        backend="kubernetes",
        kube_context="kinetic-test",
        namespace="default",
        pickle_by_value=["k8s_fns"],  # the job bodies of k8s_fns.py, shipped by value
        poll_interval=0.5,
    )
