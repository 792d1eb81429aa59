"""The kubernetes backend against a real API server, scheduler, controller-manager and node agent."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import kinetic_core as kc
from kinetic_core.backends import LaunchSpec, get_backend
from kinetic_core.backends.kubernetes import (
    ACCELERATORS,
    USER_AGENT,
    KubernetesBackend,
    accelerator_spec,
    job_name,
    job_state,
)
from kinetic_core.backends.kubernetes import watch as kube_watch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import k8s_fns


def _backend(target: kc.Target) -> KubernetesBackend:
    backend = get_backend(target.resolve())
    assert isinstance(backend, KubernetesBackend)
    return backend


def _get(backend: KubernetesBackend, kind: str, name: str) -> dict[str, Any] | None:
    from kinetic_core.backends.kubernetes import KubeApiError

    try:
        return backend.client.call("GET", backend.client.ns(kind, name))  # type: ignore[no-any-return]
    except KubeApiError as exc:
        if exc.status == 404:
            return None
        raise


def _pods(backend: KubernetesBackend, job_id: str) -> list[dict[str, Any]]:
    return _list(backend, "pods", job_id)


def _list(backend: KubernetesBackend, kind: str, job_id: str) -> list[dict[str, Any]]:
    return backend.client.call(  # type: ignore[no-any-return]
        "GET", backend.client.ns(kind), query={"labelSelector": f"kinetic/job-id={job_id}"}
    )["items"]


def test_round_trip_file_storage(kube: kc.Target) -> None:
    job = kc.submit(k8s_fns.square, (7,), target=kube)
    assert job.result(timeout=120) == {"square": 49, "job_id": job.job_id}


def test_round_trip_gcs_storage(kube: kc.Target, gcs_emulator: Any) -> None:
    job = kc.submit(
        k8s_fns.square, (5,), target=kube.merge({"storage": gcs_emulator.uri("k8s-e2e")})
    )
    assert job.result(timeout=120)["square"] == 25


def test_manifest_labels_limits_and_secret(kube: kc.Target) -> None:
    job = kc.submit(
        k8s_fns.square,
        (2,),
        target=kube.merge({"signing_key": "s3cret", "life_span": 600, "accelerator": "gpu-l4"}),
        tags={"dag_id": "nightly", "bad label": "x"},
    )
    backend = _backend(kube)
    manifest = _get(backend, "jobs", job_name(job.job_id))
    assert manifest is not None
    labels = manifest["metadata"]["labels"]
    assert (
        labels["app"] == "kinetic"
        and labels["kinetic/job-id"] == job.job_id
        and labels["dag_id"] == "nightly"
    )
    assert "bad label" not in labels
    spec = manifest["spec"]
    assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] == 600
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-l4"}
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "s3cret" not in json.dumps(manifest)  # the key travels in a Secret
    secret = _get(backend, "secrets", job_name(job.job_id))
    assert secret is not None and secret["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert job.result(timeout=120)["square"] == 4
    [pod_obj] = _pods(backend, job.job_id) or [None]
    assert pod_obj is None or pod_obj["spec"]["nodeName"] == "node-gpu"


def test_gpu_and_spot_land_on_their_nodes(kube: kc.Target) -> None:
    gpu = kc.submit(k8s_fns.sleep, (0,), target=kube.merge({"accelerator": "gpu-l4"}))
    spot = kc.submit(k8s_fns.sleep, (0,), target=kube.merge({"spot": True}))
    assert gpu.wait(timeout=120).status is kc.JobStatus.SUCCEEDED
    assert spot.wait(timeout=120).status is kc.JobStatus.SUCCEEDED
    backend = _backend(kube)
    assert [p["spec"]["nodeName"] for p in _pods(backend, gpu.job_id)] == ["node-gpu"]
    assert [p["spec"]["nodeName"] for p in _pods(backend, spot.job_id)] == ["node-spot"]


def test_idempotent_launch_one_job(kube: kc.Target) -> None:
    a = kc.submit(k8s_fns.sleep, (1,), target=kube, idempotency_key="k8s-idem")
    b = kc.submit(k8s_fns.sleep, (1,), target=kube, idempotency_key="k8s-idem")
    assert a.job_id == b.job_id
    backend = _backend(kube)
    # Launching the same spec again is a no-op, not an error.
    backend.launch(LaunchSpec(job_id=a.job_id, storage_uri=a.storage, target=kube.resolve()))
    jobs = _list(backend, "jobs", a.job_id)
    assert [j["metadata"]["name"] for j in jobs] == [job_name(a.job_id)]
    assert a.wait(timeout=120).status is kc.JobStatus.SUCCEEDED


def test_unschedulable_then_schedule_timeout(kube: kc.Target) -> None:
    job = kc.submit(
        k8s_fns.sleep, (0,), target=kube.merge({"accelerator": "tpu-v6e-8", "schedule_timeout": 8})
    )
    backend = _backend(kube)
    from kinetic_core.control.polling import poll_ticks

    state = job.state()
    for _ in poll_ticks(interval=0.5, timeout=60, describe=lambda: "waiting for Unschedulable"):
        state = job.state()
        if state.reason == "Unschedulable" or state.terminal:
            break
    assert state.status is kc.JobStatus.PENDING and state.reason == "Unschedulable"
    assert (
        "Insufficient google.com/tpu" in (state.message or "")
        or "node selector" in (state.message or "").lower()
        or "didn't match" in (state.message or "")
    )
    final = job.wait(timeout=120)
    assert final.status is kc.JobStatus.FAILED and final.reason == "ScheduleTimeout"
    assert "Unschedulable" in (final.message or "")
    for _ in poll_ticks(interval=0.5, timeout=60, describe=lambda: "Job deletion"):
        if _get(backend, "jobs", job_name(job.job_id)) is None:
            break
    assert _get(backend, "jobs", job_name(job.job_id)) is None


def test_life_span_deadline_exceeded(kube: kc.Target) -> None:
    job = kc.submit(k8s_fns.sleep, (120,), target=kube.merge({"life_span": 3}))
    state = job.wait(timeout=120)
    assert state.status is kc.JobStatus.FAILED and state.reason == "DeadlineExceeded"


def test_non_zero_exit_has_code_and_log_tail(kube: kc.Target) -> None:
    job = kc.submit(k8s_fns.talk_then_exit, (5, 3), target=kube)
    state = job.wait(timeout=120)
    assert state.status is kc.JobStatus.FAILED and state.exit_code == 3 and state.reason == "Error"
    with pytest.raises(kc.JobFailed) as info:
        job.result(timeout=10)
    assert "step 4" in info.value.log_tail


def test_logs_tail_and_follow(kube: kc.Target) -> None:
    job = kc.submit(k8s_fns.slow_talk, (12, 0.1), target=kube)
    lines = [line for line in job.follow_logs(timeout=120) if line.startswith("tick")]
    assert lines == [f"tick {i}" for i in range(12)]
    assert job.logs(tail=2).splitlines()[-2:] == ["tick 10", "tick 11"]


def test_cancel_deletes_job_and_pods(kube: kc.Target) -> None:
    job = kc.submit(k8s_fns.sleep, (300,), target=kube)
    from kinetic_core.control.polling import poll_ticks

    for _ in poll_ticks(interval=0.5, timeout=90, describe=lambda: "job to run"):
        if job.status() is kc.JobStatus.RUNNING:
            break
    assert job.cancel()
    assert job.wait(timeout=60).status is kc.JobStatus.CANCELLED
    backend = _backend(kube)
    for _ in poll_ticks(interval=0.5, timeout=90, describe=lambda: "pods to go"):
        if not _pods(backend, job.job_id) and _get(backend, "jobs", job_name(job.job_id)) is None:
            break
    assert _pods(backend, job.job_id) == []
    assert _get(backend, "jobs", job_name(job.job_id)) is None


def test_reasons_from_pod_status_written_through_the_api(kube: kc.Target) -> None:
    """OOMKilled and eviction as a kubelet would report them, written via the status API."""
    backend = _backend(kube)
    # Pinned to a node that does not exist, so no agent runs it and the status is ours to write.
    target = kube.merge({"node_selector": {"kubernetes.io/hostname": "nowhere"}})
    reasons = {}
    for case, status in {
        "oom": {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "runner",
                    "image": "x",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                }
            ],
        },
        "evicted": {
            "phase": "Failed",
            "reason": "Evicted",
            "message": "The node was low on resource: memory.",
        },
    }.items():
        job = kc.submit(k8s_fns.sleep, (0,), target=target, name=case)
        from kinetic_core.control.polling import poll_ticks

        for _ in poll_ticks(interval=0.3, timeout=60, describe=lambda: "pod creation"):
            pods = _pods(backend, job.job_id)
            if pods:
                break
        pod = pods[0]["metadata"]["name"]
        _patch_status(backend, pod, status)
        for _ in poll_ticks(interval=0.3, timeout=60, describe=lambda: "reason"):
            state = job.state()
            if state.terminal:
                break
        reasons[case] = (state.status, state.reason, state.exit_code)
        job.cleanup()
    assert reasons["oom"] == (kc.JobStatus.FAILED, "OOMKilled", 137)
    assert reasons["evicted"][:2] == (kc.JobStatus.FAILED, "Preempted")


def _patch_status(backend: KubernetesBackend, pod: str, status: dict[str, Any]) -> dict[str, Any]:
    params = backend.client.api.param_serialize(
        method="PATCH",
        resource_path=backend.client.ns("pods", pod) + "/status",
        header_params={
            "Content-Type": "application/merge-patch+json",
            "Accept": "application/json",
        },
        body={"status": status},
        auth_settings=["BearerToken"],
    )
    response = backend.client.api.call_api(*params)
    assert response.status < 300, response.read()
    return dict(json.loads(response.read()))


def _patch_status_seen(backend: KubernetesBackend, pod: str, status: dict[str, Any]) -> None:
    """``_patch_status``, told to the process's watch as kinetic's own writes are: its next
    poll reads the pod from a cache only once that has the patch's event (without it a
    poll right after the patch may read the cache from just before it)."""
    patched = _patch_status(backend, pod, status)
    watch = kube_watch.namespace_watch(backend.client, create=False)
    if watch is not None:
        rv = kube_watch.revision(patched["metadata"]["resourceVersion"])
        watch.wrote(patched["metadata"]["labels"]["kinetic/job-id"], rv, ("pods",))


def test_bulk_poll_is_one_list_per_namespace_for_100_jobs(
    kube: kc.Target, k8s_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KINETIC_K8S_WATCH", "0")  # the LIST fallback (the watch: test_watch.py)
    target = kube.merge({"node_selector": {"kubernetes.io/hostname": "nowhere"}})
    jobs = [kc.submit(k8s_fns.sleep, (0,), target=target, name=f"bulk-{i}") for i in range(100)]
    before_jobs = k8s_cluster.count_requests("list", "jobs", USER_AGENT)
    before_pods = k8s_cluster.count_requests("list", "pods", USER_AGENT)
    states = kc.resolve_states(jobs)
    assert len(states) == 100 and all(s.status is kc.JobStatus.PENDING for s in states)
    from kinetic_core.control.polling import poll_ticks

    for _ in poll_ticks(interval=0.3, timeout=30, describe=lambda: "audit log flush"):
        if k8s_cluster.count_requests("list", "jobs", USER_AGENT) > before_jobs:
            break
    assert k8s_cluster.count_requests("list", "jobs", USER_AGENT) - before_jobs == 1
    assert k8s_cluster.count_requests("list", "pods", USER_AGENT) - before_pods == 1
    for job in jobs:
        job.cleanup(storage=False, cancel=True)  # still pending: nothing schedules them


def test_wrong_token_is_a_credentials_error(
    kube: kc.Target, k8s_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text(
        Path(k8s_cluster.kubeconfig_path).read_text().replace(k8s_cluster.token, "wrong-token")
    )
    monkeypatch.setenv("KUBECONFIG", str(bad))
    backend = KubernetesBackend(kube.resolve())
    with pytest.raises(
        kc.ConfigError, match=r"rejected the credentials of context kinetic-test \(HTTP 401\)"
    ):
        backend.poll(["some-job"])


@pytest.mark.parametrize(
    "accelerator", [*sorted(n for n, s in ACCELERATORS.items() if not s.multi_host), "gpu-l4x4"]
)
def test_every_catalogue_manifest_passes_server_dry_run(kube: kc.Target, accelerator: str) -> None:
    target = kube.merge(
        {
            "accelerator": accelerator,
            "spot": True,
            "life_span": 3600,
            "resources": {"cpu": "4", "memory": "16Gi"},
            "service_account": "default",
        }
    ).resolve()
    backend = _backend(kube)
    spec = LaunchSpec(
        job_id=f"dry-{accelerator.replace('x', '-x')}",
        storage_uri=target.storage or "",
        target=target,
    )
    created = backend.create_job(spec, dry_run=True)
    assert created["metadata"]["name"] == job_name(spec.job_id)
    assert _get(backend, "jobs", job_name(spec.job_id)) is None  # dry run persisted nothing


def test_unknown_accelerator_is_config_error() -> None:
    with pytest.raises(kc.ConfigError, match=r"Unknown accelerator 'tpu-v9'.*gpu-l4"):
        accelerator_spec("tpu-v9")
    _, resources, tolerations = accelerator_spec("gpu-a100x8").pod_parts()
    assert resources == {"nvidia.com/gpu": 8} and tolerations[0]["key"] == "nvidia.com/gpu"


def test_job_state_translation_fixtures() -> None:
    assert job_state(None, []).phase == "not_found"
    deadline = {
        "status": {
            "conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]
        }
    }
    assert job_state(deadline, []).reason == "DeadlineExceeded"
    pull = {"status": {"active": 1}}
    pod = {
        "metadata": {},
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {"state": {"waiting": {"reason": "ErrImagePull", "message": "not found"}}}
            ],
        },
    }
    assert (job_state(pull, [pod]).phase, job_state(pull, [pod]).reason) == (
        "pending",
        "ImagePullBackOff",
    )
    disrupted = {
        "metadata": {},
        "status": {
            "phase": "Failed",
            "conditions": [{"type": "DisruptionTarget", "status": "True"}],
        },
    }
    assert job_state(pull, [disrupted]).reason == "Preempted"


def test_gke_fuse_volumes_mount_through_the_csi_driver(kube: kc.Target) -> None:
    """volumes={path: Data(gs://..., fuse=True)} on GKE: a CSI volume per mount plus the pod
    annotation the GCS FUSE sidecar injector needs; the API server accepts the manifest."""
    target = kube.merge({"backend": "gke"}).resolve()
    spec = LaunchSpec(
        job_id="fuse-volumes",
        storage_uri=target.storage or "",
        target=target,
        fuse_volumes={"/data/train": "gs://bucket-a/sets/train/", "/data/all": "gs://bucket-b"},
    )
    created = _backend(kube).create_job(spec, dry_run=True)
    template = created["spec"]["template"]
    assert template["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true"
    volumes = {v["name"]: v["csi"] for v in template["spec"]["volumes"]}
    mounts = {m["mountPath"]: m for m in template["spec"]["containers"][0]["volumeMounts"]}
    train = volumes[mounts["/data/train"]["name"]]
    assert train["driver"] == "gcsfuse.csi.storage.gke.io"
    assert train["volumeAttributes"] == {
        "bucketName": "bucket-a",
        "mountOptions": "only-dir=sets/train",
    }
    assert volumes[mounts["/data/all"]["name"]]["volumeAttributes"] == {"bucketName": "bucket-b"}
    assert all(m["readOnly"] for m in mounts.values())
    plain = LaunchSpec(job_id="no-fuse", storage_uri=target.storage or "", target=target)
    assert (
        "volumes" not in _backend(kube).create_job(plain, dry_run=True)["spec"]["template"]["spec"]
    )


def test_data_arguments_volumes_and_outputs_on_gcs(
    kube: kc.Target, gcs_emulator: Any, tmp_path: Path
) -> None:
    (tmp_path / "arg.txt").write_text("hello")
    (tmp_path / "set").mkdir()
    (tmp_path / "set" / "x.csv").write_text("1")
    mount = f"/tmp/kinetic-mount-{os.urandom(4).hex()}"
    job = kc.submit(
        k8s_fns.data_round_trip,
        (kc.Data(tmp_path / "arg.txt"), mount),
        target=kube.merge({"storage": gcs_emulator.uri(f"k8s-data-{os.urandom(3).hex()}")}),
        volumes={mount: kc.Data(tmp_path / "set")},
    )
    value = job.result(timeout=180)
    assert value["arg"] == "hello" and value["mounted"] == ["x.csv"]
    assert not str(value["out"]).startswith("gs:")
    got = Path(job.download_outputs(tmp_path / "got"))
    assert (got / "seen.txt").read_text() == "hello|x.csv"


def test_pods_get_the_manifest_env_and_a_fresh_working_directory(
    kube: kc.Target, gcs_emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing passes to a pod by accident: not the agent's (or submitter's) environment,
    not the submitter's working directory; the emulator endpoint comes from the manifest."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "local-only.txt").write_text("x")
    job = kc.submit(
        k8s_fns.where_am_i,
        target=kube.merge({"storage": gcs_emulator.uri(f"k8s-env-{os.urandom(3).hex()}")}),
    )
    seen = job.result(timeout=180)
    assert seen["cwd"] != str(tmp_path) and seen["cwd_entries"] == []
    assert "STORAGE_EMULATOR_HOST" in seen["env"]  # from the manifest
    assert "KINETIC_KILL_GRACE" not in seen["env"]  # set in the test process, not the pod's
    assert "KUBECONFIG" not in seen["env"]
