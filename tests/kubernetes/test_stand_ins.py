"""The JobSet and Kueue stand-ins of the test cluster, through raw API calls (no kinetic code).

They are what the multi-host backend is built against, so each behaviour the backend relies
on is pinned here: the CRDs served and validated by the API server, a JobSet's child Jobs on
the 4-host v5e slice, failure and restart, one delete removing everything, queued admission.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from cluster.cluster import SLICE_NODE_NAMES, TestCluster
from kubernetes import client
from kubernetes.client.exceptions import ApiException

NS = "default"
JOBSET = ("jobset.x-k8s.io", "v1alpha2", NS, "jobsets")
KUEUE = ("kueue.x-k8s.io", "v1beta1")
SLICE_SELECTOR = {
    "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
    "cloud.google.com/gke-tpu-topology": "4x4",
}
TPU_TOLERATION = {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 90) -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def worker_script(fail_index: str = "") -> str:
    """Each worker exits 0, except the one whose job-index is ``fail_index`` (exit 3)."""
    return f"import os, sys; sys.exit(3 if os.environ['INDEX'] == '{fail_index}' else 0)"


def jobset_body(
    name: str,
    replicas: int = 4,
    script: str = "pass",
    *,
    labels: dict[str, str] | None = None,
    suspend: bool = False,
    failure_policy: dict[str, Any] | None = None,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A multi-host JobSet: ``replicas`` Jobs of one pod, each asking 4 TPU chips of a host."""
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "tolerations": [TPU_TOLERATION],
        "containers": [
            {
                "name": "worker",
                "image": "python:3.12",
                "command": ["python", "-c", script],
                "env": [
                    {
                        "name": "INDEX",
                        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{JOB_INDEX}']"}},
                    }
                ],
                "resources": {
                    "requests": {"google.com/tpu": "4"},
                    "limits": {"google.com/tpu": "4"},
                },
            }
        ],
    }
    if node_selector is not None:
        pod_spec["nodeSelector"] = node_selector
    spec: dict[str, Any] = {
        "suspend": suspend,
        "network": {"enableDNSHostnames": True},
        "replicatedJobs": [
            {
                "name": "workers",
                "replicas": replicas,
                "template": {
                    "spec": {
                        "parallelism": 1,
                        "completions": 1,
                        "backoffLimit": 0,
                        "template": {"spec": pod_spec},
                    }
                },
            }
        ],
    }
    if failure_policy is not None:
        spec["failurePolicy"] = failure_policy
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


@pytest.fixture
def custom(k8s_api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(k8s_api_client)


@pytest.fixture
def core(k8s_api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(k8s_api_client)


@pytest.fixture
def batch(k8s_api_client: client.ApiClient) -> client.BatchV1Api:
    return client.BatchV1Api(k8s_api_client)


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def get_jobset(custom: client.CustomObjectsApi, name: str) -> dict[str, Any]:
    return dict(custom.get_namespaced_custom_object(*JOBSET, name))


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond["type"] == kind and cond["status"] == "True":
            return dict(cond)
    return None


def child_jobs(batch: client.BatchV1Api, name: str) -> list[client.V1Job]:
    selector = f"jobset.sigs.k8s.io/jobset-name={name}"
    return list(batch.list_namespaced_job(NS, label_selector=selector).items)


def pods_of(core: client.CoreV1Api, name: str) -> list[client.V1Pod]:
    selector = f"jobset.sigs.k8s.io/jobset-name={name}"
    return list(core.list_namespaced_pod(NS, label_selector=selector).items)


def test_jobset_of_four_hosts_runs_on_the_slice_and_completes(
    custom: client.CustomObjectsApi, batch: client.BatchV1Api, core: client.CoreV1Api
) -> None:
    name = fresh("slice")
    custom.create_namespaced_custom_object(*JOBSET, jobset_body(name, node_selector=SLICE_SELECTOR))
    done = wait_for(
        "the JobSet Completed", lambda: condition(get_jobset(custom, name), "Completed")
    )
    assert done["reason"] == "AllJobsCompleted"
    assert done["message"] == "jobset completed successfully"
    jobs = {j.metadata.name: j for j in child_jobs(batch, name)}
    assert sorted(jobs) == [f"{name}-workers-{i}" for i in range(4)]
    for index in range(4):
        job = jobs[f"{name}-workers-{index}"]
        assert job.metadata.labels[JOB_INDEX] == str(index)
        assert job.metadata.labels["jobset.sigs.k8s.io/job-global-index"] == str(index)
        assert job.metadata.labels["jobset.sigs.k8s.io/restart-attempt"] == "0"
        assert job.metadata.owner_references[0].kind == "JobSet"
        pod_meta = job.spec.template.metadata
        assert pod_meta.labels["jobset.sigs.k8s.io/replicatedjob-name"] == "workers"
        assert job.spec.template.spec.subdomain == name
        assert job.spec.template.spec.hostname == f"{name}-workers-{index}-0"
    pods = pods_of(core, name)
    assert len(pods) == 4
    # on the slice; not one per node: a worker that ended frees its node's chips for another
    assert {p.spec.node_name for p in pods} <= set(SLICE_NODE_NAMES)
    assert all(p.status.phase == "Succeeded" for p in pods)
    service = core.read_namespaced_service(name, NS)
    assert service.spec.cluster_ip == "None"
    assert service.spec.selector == {"jobset.sigs.k8s.io/jobset-name": name}
    status = get_jobset(custom, name)["status"]
    assert status["replicatedJobsStatus"] == [
        {"name": "workers", "ready": 0, "active": 0, "succeeded": 4, "failed": 0, "suspended": 0}
    ]
    assert status["terminalState"] == "Completed"


def test_failing_worker_with_no_restarts_fails_the_jobset_and_stops_the_others(
    custom: client.CustomObjectsApi, batch: client.BatchV1Api, core: client.CoreV1Api
) -> None:
    name = fresh("fail")
    script = "import os, sys, time\nif os.environ['INDEX'] == '2': sys.exit(3)\ntime.sleep(600)\n"
    custom.create_namespaced_custom_object(
        *JOBSET, jobset_body(name, script=script, failure_policy={"maxRestarts": 0})
    )
    failed = wait_for("the JobSet Failed", lambda: condition(get_jobset(custom, name), "Failed"))
    assert failed["reason"] == "ReachedMaxRestarts"
    assert failed["message"] == (
        f"jobset failed due to reaching max number of restarts (first failed job: {name}-workers-2)"
    )
    # the three sleeping workers are stopped: their Jobs deleted, their pods gone
    wait_for(
        "only the failed Job left",
        lambda: [j.metadata.name for j in child_jobs(batch, name)] == [f"{name}-workers-2"],
    )
    wait_for(
        "no running pod left",
        lambda: not [p for p in pods_of(core, name) if p.status.phase in ("Pending", "Running")],
    )
    assert get_jobset(custom, name)["status"]["restarts"] == 0


def test_max_restarts_one_restarts_every_job_then_fails(
    custom: client.CustomObjectsApi, batch: client.BatchV1Api
) -> None:
    name = fresh("restart")
    script = "import os, sys, time\nif os.environ['INDEX'] == '1': sys.exit(3)\ntime.sleep(600)\n"
    custom.create_namespaced_custom_object(
        *JOBSET, jobset_body(name, script=script, failure_policy={"maxRestarts": 1})
    )
    attempts: set[str] = set()

    def restarted_then_failed() -> dict[str, Any] | None:
        for job in child_jobs(batch, name):
            attempts.add(job.metadata.labels["jobset.sigs.k8s.io/restart-attempt"])
        return condition(get_jobset(custom, name), "Failed")

    failed = wait_for("the JobSet Failed after one restart", restarted_then_failed, 150)
    assert failed["reason"] == "ReachedMaxRestarts"
    status = get_jobset(custom, name)["status"]
    assert status["restarts"] == 1
    assert status["restartsCountTowardsMax"] == 1
    assert attempts == {"0", "1"}
    # the three other Jobs of attempt 1 are stopped; the failed one is kept, as upstream
    left: list[tuple[str, str]] = []
    jobs: list[Any] = []

    def only_the_failed_job() -> bool:
        jobs[:] = child_jobs(batch, name)
        left[:] = [
            (j.metadata.name, j.metadata.labels["jobset.sigs.k8s.io/restart-attempt"]) for j in jobs
        ]
        return left == [(f"{name}-workers-1", "1")]

    try:
        wait_for("only attempt 1's failed Job left", only_the_failed_job)
    except AssertionError as exc:  # which Jobs stayed, and how they ended
        how = [(j.metadata.uid, j.metadata.creation_timestamp, j.status) for j in jobs]
        raise AssertionError(f"{exc}; Jobs left: {left}; {failed.get('message')}; {how}") from None


def test_deleting_the_jobset_removes_jobs_pods_and_service(
    custom: client.CustomObjectsApi, batch: client.BatchV1Api, core: client.CoreV1Api
) -> None:
    name = fresh("delete")
    body = jobset_body(name, script="import time; time.sleep(600)")
    custom.create_namespaced_custom_object(*JOBSET, body)
    wait_for(
        "4 running pods",
        lambda: len([p for p in pods_of(core, name) if p.status.phase == "Running"]) == 4,
    )
    core.read_namespaced_service(name, NS)
    custom.delete_namespaced_custom_object(
        *JOBSET, name, body=client.V1DeleteOptions(propagation_policy="Foreground")
    )

    def everything_gone() -> bool:
        try:
            core.read_namespaced_service(name, NS)
            return False
        except ApiException as exc:
            if exc.status != 404:
                raise
        return not child_jobs(batch, name) and not pods_of(core, name)

    wait_for("Jobs, pods and Service deleted", everything_gone, 120)


def test_crd_schema_rejects_a_field_of_the_wrong_type(custom: client.CustomObjectsApi) -> None:
    body = jobset_body(fresh("invalid"))
    body["spec"]["replicatedJobs"][0]["replicas"] = "four"
    with pytest.raises(ApiException) as caught:
        custom.create_namespaced_custom_object(*JOBSET, body)
    assert caught.value.status == 422
    assert "spec.replicatedJobs.replicas" in caught.value.body
    # the embedded pod template is validated too (its schema is the server's own Pod type)
    body = jobset_body(fresh("invalid"))
    body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0][
        "command"
    ] = "python -c pass"
    with pytest.raises(ApiException) as caught:
        custom.create_namespaced_custom_object(*JOBSET, body)
    assert caught.value.status == 422
    assert "command" in caught.value.body


def kueue_object(kind: str, name: str, spec: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": kind,
        "metadata": {"name": name},
        **extra,
        "spec": spec,
    }


def create_queue(
    custom: client.CustomObjectsApi, flavor: str, cq: str, lq: str, chips: int
) -> dict[str, Any]:
    """A ResourceFlavor of the slice, a ClusterQueue of ``chips`` TPU chips on it and a
    LocalQueue pointing there; returns the ClusterQueue's spec."""
    custom.create_cluster_custom_object(
        *KUEUE,
        "resourceflavors",
        kueue_object("ResourceFlavor", flavor, {"nodeLabels": SLICE_SELECTOR}),
    )
    tpu = [{"name": "google.com/tpu", "nominalQuota": chips}]
    quota = {
        "resourceGroups": [
            {
                "coveredResources": ["google.com/tpu"],
                "flavors": [{"name": flavor, "resources": tpu}],
            }
        ]
    }
    custom.create_cluster_custom_object(
        *KUEUE, "clusterqueues", kueue_object("ClusterQueue", cq, quota)
    )
    custom.create_namespaced_custom_object(
        *KUEUE, NS, "localqueues", kueue_object("LocalQueue", lq, {"clusterQueue": cq})
    )
    return quota


def test_queued_jobset_waits_for_quota_then_runs(
    k8s_cluster: TestCluster, custom: client.CustomObjectsApi, core: client.CoreV1Api
) -> None:
    flavor, cq, lq, name = fresh("v5e"), fresh("cq"), fresh("lq"), fresh("queued")
    quota = create_queue(custom, flavor, cq, lq, chips=8)
    custom.create_cluster_custom_object(
        *KUEUE, "workloadpriorityclasses",
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "WorkloadPriorityClass",
         "metadata": {"name": f"{name}-high"}, "value": 1000},
    )  # fmt: skip
    body = jobset_body(
        name,
        suspend=True,
        labels={"kueue.x-k8s.io/queue-name": lq, "kueue.x-k8s.io/priority-class": f"{name}-high"},
    )
    custom.create_namespaced_custom_object(*JOBSET, body)

    def workload() -> dict[str, Any] | None:
        items = custom.list_namespaced_custom_object(*KUEUE, NS, "workloads")["items"]
        mine = [w for w in items if w["metadata"]["ownerReferences"][0]["name"] == name]
        return mine[0] if mine else None

    def pending() -> dict[str, Any] | None:
        wl = workload()
        conds = (wl or {}).get("status", {}).get("conditions") or []
        return next((c for c in conds if c["type"] == "QuotaReserved"), None)

    reserved = wait_for("the Workload pending", pending)
    assert reserved["status"] == "False"
    assert reserved["reason"] == "Pending"
    assert reserved["message"] == (
        "couldn't assign flavors to pod set workers: insufficient quota for google.com/tpu in "
        f"flavor {flavor}, previously considered podsets requests (0) + current podset request "
        "(16) > maximum capacity (8)"
    )
    wl = workload()
    assert wl is not None
    assert wl["spec"]["priority"] == 1000
    assert wl["spec"]["podSets"][0]["count"] == 4
    js = get_jobset(custom, name)
    assert js["spec"]["suspend"] is True
    suspended = wait_for("Suspended", lambda: condition(get_jobset(custom, name), "Suspended"))
    assert suspended["reason"] == "SuspendedJobs"
    assert not pods_of(core, name)

    quota["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 16
    custom.patch_cluster_custom_object(*KUEUE, "clusterqueues", cq, {"spec": quota})
    done = wait_for(
        "the JobSet Completed once admitted",
        lambda: condition(get_jobset(custom, name), "Completed"),
        120,
    )
    assert done["reason"] == "AllJobsCompleted"
    wl = workload()
    assert wl is not None
    assert wl["status"]["admission"]["clusterQueue"] == cq
    assert wl["status"]["admission"]["podSetAssignments"][0]["flavors"] == {
        "google.com/tpu": flavor
    }
    assert condition(wl, "Admitted") is not None
    pod_selector = get_jobset(custom, name)["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"
    ]["spec"]["nodeSelector"]
    assert pod_selector == SLICE_SELECTOR
    # on the admitted flavor's slice; not one per node: a worker that ended frees its node's
    # chips for another (`pass` ends at once), so two may run on one node one after the other
    assert {p.spec.node_name for p in pods_of(core, name)} <= set(SLICE_NODE_NAMES)
    finished = wait_for("the Workload Finished", lambda: condition(workload() or {}, "Finished"))
    assert finished["reason"] == "Succeeded"


def test_local_queue_of_a_missing_cluster_queue_is_inadmissible(
    custom: client.CustomObjectsApi,
) -> None:
    lq, name = fresh("lq"), fresh("orphan")
    custom.create_namespaced_custom_object(
        *KUEUE, NS, "localqueues", kueue_object("LocalQueue", lq, {"clusterQueue": "no-such-cq"})
    )
    body = jobset_body(name, suspend=True, labels={"kueue.x-k8s.io/queue-name": lq})
    custom.create_namespaced_custom_object(*JOBSET, body)

    def message() -> str:
        for wl in custom.list_namespaced_custom_object(*KUEUE, NS, "workloads")["items"]:
            if wl["metadata"]["ownerReferences"][0]["name"] == name:
                for cond in wl.get("status", {}).get("conditions") or []:
                    if cond["type"] == "QuotaReserved":
                        return f"{cond['status']}/{cond['reason']}/{cond['message']}"
        return ""

    assert wait_for("the Workload inadmissible", message) == (
        "False/Inadmissible/ClusterQueue no-such-cq doesn't exist"
    )
    assert get_jobset(custom, name)["spec"]["suspend"] is True


def test_finished_workload_releases_its_quota_to_the_next(
    custom: client.CustomObjectsApi, tmp_path: Path
) -> None:
    flavor, cq, lq = fresh("v5e"), fresh("cq"), fresh("lq")
    first, second = fresh("first"), fresh("second")
    create_queue(custom, flavor, cq, lq, chips=16)
    queued = {"kueue.x-k8s.io/queue-name": lq}
    release = tmp_path / "release"  # pods are local processes: the first runs until told
    script = f"import os, time\nwhile not os.path.exists({str(release)!r}): time.sleep(0.2)"
    custom.create_namespaced_custom_object(
        *JOBSET, jobset_body(first, script=script, suspend=True, labels=queued)
    )
    wait_for("the first admitted", lambda: not get_jobset(custom, first)["spec"]["suspend"])
    custom.create_namespaced_custom_object(
        *JOBSET, jobset_body(second, suspend=True, labels=queued)
    )

    def second_message() -> str:
        for wl in custom.list_namespaced_custom_object(*KUEUE, NS, "workloads")["items"]:
            if wl["metadata"]["ownerReferences"][0]["name"] == second:
                for cond in wl.get("status", {}).get("conditions") or []:
                    if cond["type"] == "QuotaReserved" and cond["status"] == "False":
                        return str(cond["message"])
        return ""

    assert wait_for("the second pending", second_message) == (
        "couldn't assign flavors to pod set workers: insufficient unused quota for "
        f"google.com/tpu in flavor {flavor}, 16 more needed"
    )
    assert get_jobset(custom, second)["spec"]["suspend"] is True
    assert condition(get_jobset(custom, first), "Completed") is None  # still holds the quota
    release.touch()
    wait_for(
        "the second Completed after the first",
        lambda: condition(get_jobset(custom, second), "Completed"),
        150,
    )
    assert condition(get_jobset(custom, first), "Completed") is not None
