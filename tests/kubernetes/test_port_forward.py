"""``kinetic jobs port-forward`` / ``JobHandle.port_forward`` on the test cluster: a job serves
HTTP in its pod, a local port reaches it through the API server's ``pods/portforward`` (the
node agent plays the kubelet's port-forward endpoint), connection after connection; a job
that is over, and credentials without the ``pods/portforward`` rule, are refused clearly."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import urllib.request
from dataclasses import replace
from pathlib import Path

import portfwd_fns
import pytest
from cluster.cluster import KINETIC_RULES, TestCluster

import kinetic_core as kc
from kinetic_core.backends.kubernetes import KubernetesBackend
from kinetic_core.control.polling import poll_ticks


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as answer:
        return str(answer.read().decode())


def serving(kube: kc.Target, seconds: float = 120, worker: int = 0) -> tuple[kc.JobHandle, int]:
    """A running job that serves its page on a free port of the node (worker k of a slice on
    that port + k), once it says so."""
    port = free_port()
    target = kube.merge({"pickle_by_value": ["k8s_fns", "portfwd_fns"]})
    job = kc.submit(portfwd_fns.serve_page, (port, seconds), target=target)
    at = None if job.workers == 1 else worker
    for _ in poll_ticks(interval=0.25, timeout=120, describe=lambda: "the job's server"):
        if f"serving on port {port + worker}" in job.logs(worker=at):
            break
    return job, port


def forwards_audited(cluster: TestCluster, pod: str) -> int:
    """Port-forward requests for ``pod`` the API server audited (one per connection)."""
    return len(
        {
            e["auditID"]
            for e in cluster.audit_events()
            if (e.get("objectRef") or {}).get("subresource") == "portforward"
            and e["objectRef"].get("name") == pod
        }
    )


def test_port_forward_reaches_the_jobs_server_connection_after_connection(
    kube: kc.Target, k8s_cluster: TestCluster, caplog: pytest.LogCaptureFixture
) -> None:
    job, port = serving(kube)
    try:
        with job.port_forward(f":{port}") as forward:
            assert not forward.already_local
            local = forward.local_port(port)
            assert local != port  # any free local port: the page comes through the forward
            page = f"hello from job {job.job_id}\n"
            assert get(forward.url(port)) == page
            assert get(forward.url(port) + "/again") == page  # a second connection
            assert forward.ended is None
            assert forwards_audited(k8s_cluster, forward.pod) == 2  # through the API server
            unused = free_port()
            with job.port_forward(f":{unused}") as nobody, caplog.at_level(logging.WARNING):
                with socket.create_connection(("127.0.0.1", nobody.local_port(unused))) as conn:
                    assert conn.recv(10) == b""  # dropped, with the kubelet's words logged
                assert f"failed to connect to localhost:{unused}" in caplog.text
                assert nobody.ended is None  # the forward stays up for the next connection
            job.cancel()  # its pod goes: the next connection ends the forward, saying why
            admin = KubernetesBackend(kube.resolve())
            for _ in poll_ticks(interval=0.25, timeout=60, describe=lambda: "the pod to go"):
                if not admin.job_pods(job.job_id):
                    break
            with socket.create_connection(("127.0.0.1", local), timeout=30) as conn:
                assert conn.recv(10) == b""
            assert forward.wait(timeout=60)
            assert forward.ended is not None and f"pod {forward.pod}" in forward.ended
            assert "is gone" in forward.ended
        with pytest.raises(OSError):  # closed: nothing listens any more
            socket.create_connection(("127.0.0.1", local), timeout=5).close()
    finally:
        job.cancel()
    with pytest.raises(kc.JobNotRunning, match=r"CANCELLED.*nothing to forward"):
        job.port_forward(port)


def test_cli_port_forward_serves_until_interrupted(
    kube: kc.Target, k8s_cluster: TestCluster, tmp_path: Path
) -> None:
    job, port = serving(kube)
    local = free_port()
    cli = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kinetic_core.cli",
            "jobs",
            "port-forward",
            job.job_id,
            f"{local}:{port}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert cli.stdout is not None
        line = cli.stdout.readline()
        assert f"127.0.0.1:{local} -> {port}" in line, line
        assert get(f"http://127.0.0.1:{local}/") == f"hello from job {job.job_id}\n"
        cli.send_signal(2)  # Ctrl-C
        out, _ = cli.communicate(timeout=30)
        assert cli.returncode == 0, out
    finally:
        if cli.poll() is None:
            cli.kill()
        job.cancel()


PORTFORWARD_RULE = {
    "apiGroups": [""],
    "resources": ["pods/portforward"],
    "verbs": ["get", "create"],
}


@pytest.mark.timeout(300)
def test_missing_pods_portforward_rule_is_named_then_the_documented_rule_suffices(
    kube: kc.Target, k8s_cluster: TestCluster
) -> None:
    account = f"no-portforward-{os.urandom(3).hex()}"
    content = k8s_cluster.service_account_kubeconfig(account, KINETIC_RULES)
    job, port = serving(replace(kube, kubeconfig=content))
    try:
        with pytest.raises(kc.PermissionDenied, match="verb get on pods/portforward") as refused:
            job.port_forward(f":{port}")
        assert refused.value.resource == "pods/portforward"
        assert 'verbs: ["get", "create"]' in str(refused.value)

        k8s_cluster.grant(account, [*KINETIC_RULES, PORTFORWARD_RULE])  # the docs' Role
        for _ in poll_ticks(interval=0.5, timeout=30, describe=lambda: "the new Role to apply"):
            with contextlib.suppress(kc.PermissionDenied), job.port_forward(f":{port}") as forward:
                assert get(forward.url(port)) == f"hello from job {job.job_id}\n"
                break
    finally:
        job.cancel()


@pytest.mark.timeout(300)
def test_worker_k_of_a_slice_is_forwarded_to_its_own_pod(
    kube: kc.Target, k8s_cluster: TestCluster
) -> None:
    job, port = serving(kube.merge({"accelerator": "tpu-v5e-16"}), worker=2)
    try:
        assert job.workers == 4
        with job.port_forward(f":{port + 2}", worker=2) as forward:
            assert get(forward.url(port + 2)) == f"hello from job {job.job_id}\n"
            pods = KubernetesBackend(kube.resolve()).job_pods(job.job_id, 2)
            assert forward.pod in [p["metadata"]["name"] for p in pods]  # worker 2's own pod
            assert forwards_audited(k8s_cluster, forward.pod) == 1
        with pytest.raises(kc.ConfigError, match="worker=4"):
            job.port_forward(f":{port}", worker=4)
    finally:
        job.cancel()
