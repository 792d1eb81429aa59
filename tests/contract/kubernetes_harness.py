"""The Kubernetes backend under the contract, on the real test cluster.

An execution is a pod carrying the job's label ``kinetic/job-id`` that has not finished,
found through the API by label (so pods orphaned from their Job count); the top-level
object is the Job. The backend talks to the API server through ``TcpProxy`` (TLS passes
through), so network faults are real: connections reset, an answer lost after the server
acted on the request. What the harness itself reads or deletes goes straight to the API
server with the official client, never through the backend under test.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

import kinetic_core as kc
from kinetic_core.backends import LaunchSpec
from kinetic_core.backends.kubernetes import job_name
from tests.contract.harness import FNS, SIGNING_KEY, Fault, Harness, monkeypatch_env, until
from tests.contract.tcp_proxy import TcpProxy
from tests.kubernetes.cluster.cluster import CONTEXT, TestCluster

NAMESPACE = "default"
# A Job create carries the whole manifest (about 1300 bytes on the wire); the reads of a
# launch or poll (GET, LIST) are under 400.
JOB_CREATE_BYTES = 900
# Reset more sends than one request's own transport retries absorb, fewer than the policy's.
TRANSIENT_RESETS = 4
LABEL = "kinetic/job-id"
FINISHED = ("Succeeded", "Failed")


def proxy_kubeconfig(cluster: TestCluster, proxy: TcpProxy, path: Path) -> Path:
    """The cluster's kubeconfig with its server moved to the proxy (same CA and token: the
    API server's certificate is valid for 127.0.0.1, whichever port)."""
    assert cluster.kubeconfig_path is not None
    kubeconfig = json.loads(cluster.kubeconfig_path.read_text())
    for entry in kubeconfig["clusters"]:
        entry["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    path.write_text(json.dumps(kubeconfig))
    path.chmod(0o600)
    return path


class KubernetesHarness(Harness):
    name = "kubernetes"
    has_lasting_fault = True
    #: What a launch creates first, and the least size of its create on the wire: the
    #: lost-answer fault drops the answer to the first request at least that big.
    top_kind = "Job"
    create_bytes = JOB_CREATE_BYTES

    def setup(self, request: pytest.FixtureRequest, mp: pytest.MonkeyPatch) -> kc.Target:
        cluster: TestCluster = request.getfixturevalue("k8s_cluster")
        self.proxy: TcpProxy = request.getfixturevalue("api_proxy")
        self.proxy.clear()
        storage = f"file://{self.tmp / 'store'}"  # the node agent's pods run on this machine
        monkeypatch_env(mp, storage)
        mp.setenv("KUBECONFIG", str(cluster.kubeconfig_path))
        kubeconfig = proxy_kubeconfig(cluster, self.proxy, self.tmp / "kubeconfig-via-proxy")
        self.api = config.new_client_from_config(
            config_file=str(cluster.kubeconfig_path), context=CONTEXT
        )
        self.core = client.CoreV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        return kc.Target(
            backend="kubernetes",
            kube_context=CONTEXT,
            kubeconfig=str(kubeconfig),
            namespace=NAMESPACE,
            storage=storage,
            signing_key=SIGNING_KEY,
            pickle_by_value=[FNS],
            poll_interval=0.5,
        )

    # ---- what is there ------------------------------------------------------------------
    def _pods(self, job_id: str) -> list[Any]:
        return list(
            self.core.list_namespaced_pod(NAMESPACE, label_selector=f"{LABEL}={job_id}").items
        )

    def _jobs(self, job_id: str) -> list[Any]:
        return list(
            self.batch.list_namespaced_job(NAMESPACE, label_selector=f"{LABEL}={job_id}").items
        )

    def executions(self, job_id: str) -> list[str]:
        return sorted(
            f"pod {p.metadata.name}" for p in self._pods(job_id) if p.status.phase not in FINISHED
        )

    def tops(self, job_id: str) -> list[str]:
        return sorted(f"Job {j.metadata.name}" for j in self._jobs(job_id))

    def records(self, job_id: str) -> list[str]:
        found = [f"Job {j.metadata.name}" for j in self._jobs(job_id)]
        found += [f"Pod {p.metadata.name}" for p in self._pods(job_id)]
        secrets = self.core.list_namespaced_secret(NAMESPACE).items
        found += [
            f"Secret {s.metadata.name}"
            for s in secrets
            if s.metadata.name == job_name(job_id) or (s.metadata.labels or {}).get(LABEL) == job_id
        ]
        return sorted(found)

    # ---- faults -------------------------------------------------------------------------
    def orphan(self, job_id: str) -> None:
        """``kubectl delete job --cascade=orphan``: the Job goes, its pod keeps running."""
        self.batch.delete_namespaced_job(
            job_name(job_id), NAMESPACE, body=client.V1DeleteOptions(propagation_policy="Orphan")
        )
        until(f"Job {job_name(job_id)} to go", lambda: not self._jobs(job_id))

    def transient_launch_fault(self) -> contextlib.AbstractContextManager[Fault]:
        """The next few sends to the API server are reset (never reach it)."""
        return self._resets(
            f"the next {TRANSIENT_RESETS} sends to the API server reset",
            lambda: self.proxy.reset_next(TRANSIENT_RESETS),
        )

    def lasting_launch_fault(self) -> contextlib.AbstractContextManager[Fault]:
        """Every send to the API server is reset until the block ends."""
        return self._resets(
            "every send to the API server reset", lambda: self.proxy.reset_all(True)
        )

    @contextlib.contextmanager
    def _resets(self, what: str, arm: Callable[[], None]) -> Iterator[Fault]:
        """The proxy resets sends as ``arm`` sets it, inside the block; the fault counts them."""
        fault = Fault(what)
        arm()
        try:
            yield fault
        finally:
            fault.injected = self.proxy.resets
            self.proxy.clear()

    @contextlib.contextmanager
    def lost_answer(self, spec: LaunchSpec) -> Iterator[Fault]:
        """The API server gets the Job (JobSet) create and acts on it; its answer is
        dropped and the connection reset."""
        fault = Fault(f"the answer to the {self.top_kind} create dropped")
        self.backend.poll([spec.job_id])  # an open connection to reuse: no TLS handshake
        self.proxy.drop_next_answer(self.create_bytes)
        try:
            yield fault
        finally:
            fault.injected = self.proxy.answers_dropped
            fault.what += f" (request sizes relayed: {self.proxy.requests})"
            self.proxy.clear()

    # ---- teardown -----------------------------------------------------------------------
    def cleanup(self) -> None:
        super().cleanup()
        self.proxy.clear()
        for job_id in self.job_ids:
            selector = f"{LABEL}={job_id}"
            self.batch.delete_collection_namespaced_job(
                NAMESPACE, label_selector=selector, propagation_policy="Background"
            )
            self.core.delete_collection_namespaced_pod(
                NAMESPACE, label_selector=selector, grace_period_seconds=0
            )
            with contextlib.suppress(client.ApiException):
                self.core.delete_namespaced_secret(job_name(job_id), NAMESPACE)
        self.api.close()
