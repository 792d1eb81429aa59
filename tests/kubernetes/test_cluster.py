"""Proof that the test cluster is a real Kubernetes: Jobs, scheduling, deletion, logs, audit.

These tests exercise the control plane the Kubernetes backend will talk to, so a broken
cluster shows up here (with component logs) rather than as confusing backend failures.
Waits are bounded and fail with what was last observed; nothing asserts on durations.
"""

from __future__ import annotations

import os
import re
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from cluster.cluster import TestCluster
from kubernetes import client
from kubernetes.client.exceptions import ApiException

NAMESPACE = "default"
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 90) -> T:
    """Poll `probe` until it returns something truthy; fail naming `what` and the last value."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except ApiException as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(0.25)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}; last seen: {last!r}")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def container(name: str, code: str) -> dict[str, Any]:
    """A container running `python -c code` (the agent maps python to its own interpreter)."""
    return {"name": name, "image": "python:3.11-slim", "command": ["python", "-u", "-c", code]}


def job_body(name: str, code: str, **spec: Any) -> client.V1Job:
    return client.V1Job.from_dict(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "terminationGracePeriodSeconds": 5,
                        "containers": [container("main", code)],
                    }
                },
                **spec,
            },
        }
    )


def job_condition(batch: client.BatchV1Api, name: str) -> str | None:
    """'Complete' or 'Failed' once the Job controller decided, else None."""
    job = batch.read_namespaced_job_status(name, NAMESPACE)
    for cond in job.status.conditions or []:
        if cond.type in ("Complete", "Failed") and cond.status == "True":
            return str(cond.type)
    return None


def job_pods(core: client.CoreV1Api, name: str) -> list[client.V1Pod]:
    return list(core.list_namespaced_pod(NAMESPACE, label_selector=f"job-name={name}").items)


@pytest.fixture
def core(k8s_api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(k8s_api_client)


@pytest.fixture
def batch(k8s_api_client: client.ApiClient) -> client.BatchV1Api:
    return client.BatchV1Api(k8s_api_client)


def test_job_completes_and_its_log_is_served(
    core: client.CoreV1Api, batch: client.BatchV1Api
) -> None:
    name = unique("hello")
    code = "print('hello'); print('second'); import sys; sys.exit(0)"
    batch.create_namespaced_job(NAMESPACE, job_body(name, code))

    assert wait_for(f"Job {name} to finish", lambda: job_condition(batch, name)) == "Complete"
    (pod,) = job_pods(core, name)
    assert pod.status.phase == "Succeeded"
    assert pod.spec.node_name
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (0, "Completed")

    log = core.read_namespaced_pod_log(pod.metadata.name, NAMESPACE)
    assert log == "hello\nsecond\n"
    tail = core.read_namespaced_pod_log(pod.metadata.name, NAMESPACE, tail_lines=1)
    assert tail == "second\n"
    stamped = core.read_namespaced_pod_log(pod.metadata.name, NAMESPACE, timestamps=True)
    assert re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z (hello|second)\n){2}", stamped), (
        stamped
    )
    batch.delete_namespaced_job(name, NAMESPACE, propagation_policy="Background")


def test_failing_job_reports_exit_code(core: client.CoreV1Api, batch: client.BatchV1Api) -> None:
    name = unique("fail")
    batch.create_namespaced_job(NAMESPACE, job_body(name, "import sys; sys.exit(3)"))

    assert wait_for(f"Job {name} to finish", lambda: job_condition(batch, name)) == "Failed"
    (pod,) = job_pods(core, name)
    assert pod.status.phase == "Failed"
    terminated = pod.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "Error")
    batch.delete_namespaced_job(name, NAMESPACE, propagation_policy="Background")


def test_gpu_pod_is_scheduled_on_the_gpu_node(core: client.CoreV1Api) -> None:
    name = unique("gpu")
    pod = client.V1Pod.from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
                "containers": [
                    {
                        **container("main", "print('on gpu')"),
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ],
            },
        }
    )
    core.create_namespaced_pod(NAMESPACE, pod)

    def succeeded() -> client.V1Pod | None:
        current = core.read_namespaced_pod(name, NAMESPACE)
        return current if current.status.phase == "Succeeded" else None

    done = wait_for(f"pod {name} to succeed", succeeded)
    assert done.spec.node_name == "node-gpu"
    core.delete_namespaced_pod(name, NAMESPACE)


def test_oversized_tpu_request_stays_pending_unschedulable(core: client.CoreV1Api) -> None:
    name = unique("tpu")
    pod = client.V1Pod.from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Never",
                "nodeSelector": {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice"},
                "containers": [
                    {
                        **container("main", "print('never runs')"),
                        "resources": {"limits": {"google.com/tpu": "16"}},
                    }
                ],
            },
        }
    )
    core.create_namespaced_pod(NAMESPACE, pod)

    def unschedulable() -> client.V1PodCondition | None:
        current = core.read_namespaced_pod(name, NAMESPACE)
        for cond in current.status.conditions or []:
            if cond.type == "PodScheduled" and cond.reason == "Unschedulable":
                return cond
        return None

    cond = wait_for(f"scheduler to mark {name} Unschedulable", unschedulable)
    assert cond.status == "False"
    assert "google.com/tpu" in (cond.message or "")
    current = core.read_namespaced_pod(name, NAMESPACE)
    assert current.status.phase == "Pending"
    assert current.spec.node_name is None
    core.delete_namespaced_pod(name, NAMESPACE)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_foreground_delete_kills_the_process_and_removes_pods(
    core: client.CoreV1Api, batch: client.BatchV1Api
) -> None:
    name = unique("sleeper")
    code = "import os, time; print(os.getpid(), flush=True); time.sleep(600)"
    batch.create_namespaced_job(NAMESPACE, job_body(name, code))

    def pid_from_log() -> int | None:
        pods = job_pods(core, name)
        if not pods or pods[0].status.phase != "Running":
            return None
        text = core.read_namespaced_pod_log(pods[0].metadata.name, NAMESPACE).strip()
        return int(text) if text.isdigit() else None

    pid = wait_for(f"Job {name}'s process to report its pid", pid_from_log)
    assert _pid_alive(pid)

    batch.delete_namespaced_job(name, NAMESPACE, propagation_policy="Foreground")
    wait_for(f"pid {pid} to be killed", lambda: not _pid_alive(pid))
    wait_for(f"pods of {name} to disappear", lambda: not job_pods(core, name))

    def job_gone() -> bool:
        try:
            batch.read_namespaced_job(name, NAMESPACE)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(f"Job {name} to be deleted", job_gone)


def test_follow_streams_lines_while_the_process_runs(
    core: client.CoreV1Api, batch: client.BatchV1Api
) -> None:
    # The process prints one line, then blocks until the test has RECEIVED that line through
    # the followed stream. If follow did not stream, the job would never finish and the wait
    # below would fail: streaming is proven without any timing assertion.
    gate = Path(tempfile.mkdtemp(prefix="kinetic-follow-")) / "go"
    name = unique("follow")
    code = (
        "import os, time\n"
        "print('first', flush=True)\n"
        f"while not os.path.exists({str(gate)!r}): time.sleep(0.1)\n"
        "print('second', flush=True)\n"
    )
    batch.create_namespaced_job(NAMESPACE, job_body(name, code))

    def running_pod() -> str | None:
        pods = job_pods(core, name)
        return pods[0].metadata.name if pods and pods[0].status.phase == "Running" else None

    pod_name = wait_for(f"Job {name}'s pod to run", running_pod)
    stream = core.read_namespaced_pod_log(
        pod_name, NAMESPACE, follow=True, _preload_content=False, _request_timeout=60
    )
    received: list[str] = []
    try:
        buf = b""
        for chunk in stream.stream(1024):
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                received.append(line.decode())
                if line == b"first":
                    assert job_condition(batch, name) is None, "job finished before the gate"
                    gate.touch()
    finally:
        stream.release_conn()
        gate.unlink(missing_ok=True)
        gate.parent.rmdir()
    assert received == ["first", "second"]
    assert wait_for(f"Job {name} to finish", lambda: job_condition(batch, name)) == "Complete"
    batch.delete_namespaced_job(name, NAMESPACE, propagation_policy="Background")


def test_audit_log_counts_requests_by_user_agent(
    k8s_cluster: TestCluster, k8s_api_client: client.ApiClient
) -> None:
    agent = unique("kinetic-audit-probe")
    api_client = client.ApiClient(k8s_api_client.configuration)
    api_client.user_agent = agent
    try:
        batch = client.BatchV1Api(api_client)
        for _ in range(3):
            batch.list_namespaced_job(NAMESPACE)
        batch.list_job_for_all_namespaces()
    finally:
        api_client.close()

    wait_for(
        "4 audited LIST jobs requests from the probe",
        lambda: k8s_cluster.count_requests("list", "jobs", user_agent=agent) == 4,
        timeout=30,
    )
    assert k8s_cluster.count_requests("create", "jobs", user_agent=agent) == 0


def test_the_control_plane_is_whole_after_an_api_server_outage(
    k8s_cluster: TestCluster, core: client.CoreV1Api, batch: client.BatchV1Api
) -> None:
    """Tests that follow an outage need controllers that see pods at once. A Job controller
    whose pod watch is still backing off after the outage never sees a pod created and
    deleted meanwhile, and waits out its expectations (5 minutes) before replacing it."""
    with k8s_cluster.control_plane_outage():
        time.sleep(8)
    name = unique("replaced")
    batch.create_namespaced_job(NAMESPACE, job_body(name, "import time; time.sleep(600)"))
    first = wait_for("the first pod", lambda: job_pods(core, name))[0].metadata.name
    core.delete_namespaced_pod(first, NAMESPACE, grace_period_seconds=0)
    wait_for(
        "the Job controller to replace the deleted pod",
        lambda: [p for p in job_pods(core, name) if p.metadata.name != first],
        timeout=30,
    )
    batch.delete_namespaced_job(name, NAMESPACE, propagation_policy="Foreground")
