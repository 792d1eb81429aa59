"""The pod a real team needs: every Target pod option as the API server stores it, what the
running process sees (env, secret env, shared emptyDir with a sidecar), kubeconfig content,
and bad input refused before anything exists in the cluster."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kinetic_core as kc
from kinetic_core.backends import get_backend
from kinetic_core.backends.kubernetes import KubeApiError, KubernetesBackend, job_name
from kinetic_core.control.polling import poll_ticks

sys.path.insert(0, str(Path(__file__).resolve().parent))
import k8s_fns

NOWHERE = {"kubernetes.io/hostname": "nowhere"}  # no agent runs these: the spec is ours to read


@pytest.fixture
def kube(k8s_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[kc.Target]:
    monkeypatch.setenv("KUBECONFIG", str(k8s_cluster.kubeconfig_path))
    monkeypatch.setenv("KINETIC_STORAGE", f"file://{tmp_path / 'store'}")
    yield kc.Target(
        backend="kubernetes",
        kube_context="kinetic-test",
        namespace="default",
        pickle_by_value=["k8s_fns"],
        poll_interval=0.5,
    )


def _backend(target: kc.Target) -> KubernetesBackend:
    backend = get_backend(target.resolve())
    assert isinstance(backend, KubernetesBackend)
    return backend


def _ensure(backend: KubernetesBackend, path: str, body: dict[str, Any]) -> None:
    try:
        backend.client.call("POST", path, body=body)
    except KubeApiError as exc:
        if exc.status != 409:
            raise


def _secret(backend: KubernetesBackend, name: str, data: dict[str, str]) -> None:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": encoded}
    _ensure(backend, backend.client.ns("secrets"), body)


def _config_map(backend: KubernetesBackend, name: str, data: dict[str, str]) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}
    _ensure(backend, backend.client.ns("configmaps"), body)


def _kinetic_objects(backend: KubernetesBackend) -> dict[str, list[str]]:
    query = {"labelSelector": "app=kinetic"}
    return {
        kind: sorted(
            o["metadata"]["name"]
            for o in backend.client.call("GET", backend.client.ns(kind), query=query)["items"]
        )
        for kind in ("jobs", "secrets", "pods")
    }


ALL_OPTIONS: dict[str, Any] = {
    "env": {"LITERAL_SETTING": "on", "SUBMITTER_*": None},
    "secret_env": {"WANDB_API_KEY": "wandb-creds/api-key"},
    "env_from": [{"config_map": "team-settings", "prefix": "TEAM_"}, {"secret": "team-creds"}],
    "volumes": {
        "/dev/shm": {"empty_dir": {"medium": "Memory", "size_limit": "1Gi"}},
        "/data": {"pvc": "datasets", "read_only": True},
        "/etc/creds": {"secret": "team-creds"},
        "/etc/settings": {"config_map": "team-settings", "name": "settings"},
    },
    "image_pull_policy": "IfNotPresent",
    "image_pull_secrets": ["registry-creds"],
    "priority_class": "kinetic-batch",
    "affinity": {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 1,
                    "preference": {
                        "matchExpressions": [
                            {"key": "pool", "operator": "In", "values": ["training"]}
                        ]
                    },
                }
            ]
        }
    },
    "security_context": {"runAsNonRoot": True, "fsGroup": 1000},
    "termination_grace_period": 45,
    "ttl_after_finished": 600,
    "active_deadline": 900,
    "pod_template": {
        "metadata": {"labels": {"team": "vision", "app": "not-kinetic"}},
        "spec": {
            "dnsPolicy": "ClusterFirstWithHostNet",
            "containers": [
                {"name": "runner", "workingDir": "/", "args": ["ignored"]},
                {"name": "log-shipper", "image": "fluent-bit", "command": ["sleep", "1"]},
            ],
        },
    },
}


def test_every_pod_option_is_in_the_stored_job_and_pod(
    kube: kc.Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SUBMITTER_TOKEN", "captured-value")
    backend = _backend(kube)
    _ensure(
        backend,
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "kinetic-batch"},
            "value": 1000,
        },
    )
    target = kube.merge({**ALL_OPTIONS, "node_selector": NOWHERE, "signing_key": "k"})
    job = kc.submit(k8s_fns.square, (1,), target=target)
    stored = backend.client.call("GET", backend.client.ns("jobs", job_name(job.job_id)))
    pods: list[dict[str, Any]] = []
    for _ in poll_ticks(interval=0.3, timeout=60, describe=lambda: "the Job's pod"):
        pods = backend.client.call(
            "GET",
            backend.client.ns("pods"),
            query={"labelSelector": f"kinetic/job-id={job.job_id}"},
        )["items"]
        if pods:
            break
    try:
        assert stored["spec"]["ttlSecondsAfterFinished"] == 600
        assert stored["spec"]["activeDeadlineSeconds"] == 900
        for spec in (stored["spec"]["template"]["spec"], pods[0]["spec"]):
            runner, sidecar = spec["containers"]
            env = {e["name"]: e for e in runner["env"]}
            assert env["LITERAL_SETTING"]["value"] == "on"
            assert "SUBMITTER_TOKEN" not in env  # captured values travel signed, not in the spec
            assert env["WANDB_API_KEY"]["valueFrom"]["secretKeyRef"] == {
                "name": "wandb-creds",
                "key": "api-key",
            }
            assert runner["envFrom"] == [
                {"configMapRef": {"name": "team-settings"}, "prefix": "TEAM_"},
                {"secretRef": {"name": "team-creds"}},
            ]
            mounts = {m["mountPath"]: m for m in runner["volumeMounts"]}
            assert mounts["/data"]["readOnly"] is True
            assert mounts["/etc/settings"]["name"] == "settings"
            volumes = {v["name"]: v for v in spec["volumes"]}
            assert volumes[mounts["/dev/shm"]["name"]]["emptyDir"] == {
                "medium": "Memory",
                "sizeLimit": "1Gi",
            }
            assert volumes[mounts["/data"]["name"]]["persistentVolumeClaim"]["claimName"] == (
                "datasets"
            )
            assert volumes[mounts["/etc/creds"]["name"]]["secret"]["secretName"] == "team-creds"
            assert volumes["settings"]["configMap"]["name"] == "team-settings"
            assert runner["imagePullPolicy"] == "IfNotPresent"
            assert runner["workingDir"] == "/"  # from the template
            assert runner["command"][:3] == ["python", "-m", "kinetic_core.runtime.runner"]
            assert "args" not in runner  # the engine owns the command
            assert sidecar["name"] == "log-shipper" and sidecar["image"] == "fluent-bit"
            assert spec["imagePullSecrets"] == [{"name": "registry-creds"}]
            assert spec["priorityClassName"] == "kinetic-batch"
            assert spec["affinity"] == ALL_OPTIONS["affinity"]
            assert spec["securityContext"] == {"runAsNonRoot": True, "fsGroup": 1000}
            assert spec["terminationGracePeriodSeconds"] == 45
            assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
            assert spec["nodeSelector"] == NOWHERE
        labels = pods[0]["metadata"]["labels"]
        assert labels["team"] == "vision" and labels["app"] == "kinetic"  # ours win
        assert "captured-value" not in json.dumps([stored, pods])
        assert "SUBMITTER_TOKEN" not in json.dumps(job.to_dict())
    finally:
        job.cleanup(cancel=True)  # it never schedules (NOWHERE): still pending


def test_pod_template_from_a_yaml_file(kube: kc.Target, tmp_path: Path) -> None:
    template = tmp_path / "pod.yaml"
    template.write_text(
        "hostname: trainer\ncontainers:\n  - name: runner\n    stdin: true\n"
        "tolerations:\n  - {key: dedicated, operator: Exists, effect: NoSchedule}\n"
    )
    backend = _backend(kube)
    target = kube.merge({"pod_template": str(template), "node_selector": NOWHERE, "spot": True})
    job = kc.submit(k8s_fns.square, (1,), target=target)
    try:
        stored = backend.client.call("GET", backend.client.ns("jobs", job_name(job.job_id)))
        spec = stored["spec"]["template"]["spec"]
        assert spec["hostname"] == "trainer" and spec["containers"][0]["stdin"] is True
        keys = [t["key"] for t in spec["tolerations"]]
        assert keys == ["cloud.google.com/gke-spot", "dedicated"]  # ours, then the template's
        assert spec["containers"][0]["image"] == "kinetic-workflows-runner:0.1.0"
    finally:
        job.cleanup(cancel=True)  # it never schedules (NOWHERE): still pending


def test_env_secret_env_and_shared_empty_dir_reach_the_processes(
    kube: kc.Target, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A sidecar and the kinetic container share an emptyDir; the job's value comes from the
    kinetic container whatever the sidecar does."""
    backend = _backend(kube)
    _secret(backend, "wandb-creds", {"api-key": "wandb-secret-value"})
    _secret(backend, "team-creds", {"DB_PASSWORD": "db-secret"})
    _config_map(backend, "team-settings", {"REGION": "eu"})
    monkeypatch.setenv("WANDB_PROJECT", "nightly")
    host = tmp_path / "host"
    host.mkdir()
    (host / "hello.txt").write_text("from the node")
    monkeypatch.setenv("WANDB_ENTITY", "vision")
    sidecar = (
        "import json, os; folder = json.loads(os.environ['NODE_AGENT_MOUNTS'])['/shared']; "
        "open(os.path.join(folder, 'from-sidecar'), 'w').write(os.environ['SIDECAR_SAYS']); "
        "print('the sidecar speaks', flush=True)"
    )
    target = kube.merge(
        {
            "env": {"LITERAL_SETTING": "on", "WANDB_*": None},
            "secret_env": {"WANDB_API_KEY": "wandb-creds/api-key"},
            "env_from": [
                {"config_map": "team-settings", "prefix": "TEAM_"},
                {"secret": "team-creds"},
            ],
            "volumes": {
                "/shared": {"empty_dir": {"medium": "Memory", "size_limit": "64Mi"}},
                "/etc/creds": {"secret": "team-creds", "read_only": True},
                "/etc/settings": {"config_map": "team-settings"},
                "/host": {"host_path": str(host)},
            },
            "pod_template": {
                "containers": [
                    {
                        "name": "helper",
                        "image": "python",
                        "command": ["python", "-c", sidecar],
                        "env": [{"name": "SIDECAR_SAYS", "value": "ready"}],
                        "volumeMounts": [{"name": "vol-shared", "mountPath": "/shared"}],
                    }
                ]
            },
        }
    )
    names = [
        "LITERAL_SETTING",
        "WANDB_PROJECT",
        "WANDB_ENTITY",
        "WANDB_API_KEY",
        "TEAM_REGION",
        "DB_PASSWORD",
    ]
    files = ("/etc/creds/DB_PASSWORD", "/etc/settings/REGION", "/host/hello.txt")
    job = kc.submit(k8s_fns.pod_view, (names, "/shared", "from-sidecar", files), target=target)
    view = job.result(timeout=120, cleanup=False)
    assert view["env"] == {
        "LITERAL_SETTING": "on",
        "WANDB_PROJECT": "nightly",
        "WANDB_ENTITY": "vision",
        "WANDB_API_KEY": "wandb-secret-value",
        "TEAM_REGION": "eu",
        "DB_PASSWORD": "db-secret",
    }
    assert view["sidecar_wrote"] == "ready"
    assert view["read"] == dict(zip(files, ("db-secret", "eu", "from the node"), strict=True))
    assert view["files"] == ["from-runner", "from-sidecar"]
    logs = job.logs()
    assert "the kinetic container speaks" in logs and "the sidecar speaks" not in logs
    job.cleanup()


def test_the_kinetic_container_decides_whatever_its_position() -> None:
    """The kubelet lists container statuses by name: a sidecar may come first."""
    from kinetic_core.backends.kubernetes import job_state

    def status(name: str, state: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "state": state}

    pod = {
        "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                status("a-sidecar", {"running": {"startedAt": "2026-01-01T00:00:01Z"}}),
                status("runner", {"terminated": {"exitCode": 3, "reason": "Error"}}),
            ],
        },
    }
    job = {"metadata": {}, "status": {"startTime": "2026-01-01T00:00:00Z"}}
    state = job_state(job, [pod])
    assert (state.phase, state.exit_code, state.reason) == ("exited", 3, "Error")


def test_kubeconfig_content_reaches_the_cluster_and_is_never_stored(
    kube: kc.Target, k8s_cluster: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    content = Path(k8s_cluster.kubeconfig_path).read_text()
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))  # only the content can work
    target = kube.merge({"kubeconfig": content})
    assert content not in repr(target) and content not in target.to_json()
    job = kc.submit(k8s_fns.square, (3,), target=target)
    assert job.result(timeout=120, cleanup=False)["square"] == 9
    # Reattached from storage in this process: the handle names the content, not holds it.
    again = kc.attach(job.job_id)
    assert again.status() is kc.JobStatus.SUCCEEDED
    token = k8s_cluster.token
    stored = [p.read_bytes() for p in (tmp_path / "store").rglob("*") if p.is_file()]
    assert stored and not any(token.encode() in data for data in stored)
    assert token not in job.to_json() and token not in again.to_json()
    job.cleanup()


BAD_INPUT: dict[str, tuple[dict[str, Any], str]] = {
    "unknown option": ({"pod_templates": {}}, "Unknown target option"),
    "secret without a key": ({"secret_env": {"TOKEN": "just-a-name"}}, "secret-name/key"),
    "volume name clash": (
        {"volumes": {"/a": {"pvc": "x", "name": "v"}, "/b": {"pvc": "y", "name": "v"}}},
        "volume name 'v' is used twice",
    ),
    "volume clash with the template": (
        {
            "volumes": {"/data": {"pvc": "x", "name": "data"}},
            "pod_template": {"volumes": [{"name": "data", "emptyDir": {}}]},
        },
        "also defined in pod_template",
    ),
    "relative mount path": ({"volumes": {"data": {"pvc": "x"}}}, "relative"),
    "unknown volume source": ({"volumes": {"/data": {"nfs": "x"}}}, "exactly one source"),
    "template field typo": (
        {"pod_template": {"containers": [{"name": "runner", "imagePullPolice": "Always"}]}},
        "'imagePullPolice' is not a field",
    ),
    "template not a mapping": ({"pod_template": {"containers": "runner"}}, "must be a list"),
    "template file missing": ({"pod_template": "/nonexistent/pod.yaml"}, "cannot read"),
    "template of another kind": (
        {"pod_template": {"kind": "Deployment", "spec": {}}},
        "is a Deployment",
    ),
    "bad pull policy": ({"image_pull_policy": "Sometimes"}, "image_pull_policy"),
    "negative grace": ({"termination_grace_period": -1}, "termination_grace_period"),
    "literal for a pattern": ({"env": {"WANDB_*": "x"}}, "pattern"),
    "affinity typo": ({"affinity": {"nodeAfinity": {}}}, "'nodeAfinity' is not a field"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUT))
def test_bad_pod_options_create_nothing(kube: kc.Target, tmp_path: Path, case: str) -> None:
    options, message = BAD_INPUT[case]
    backend = _backend(kube)
    before = _kinetic_objects(backend)
    with pytest.raises(kc.ConfigError, match=message.replace("*", r"\*")):
        kc.submit(
            k8s_fns.square,
            (1,),
            target={**kube.to_dict(), **options, "signing_key": "k"},
            idempotency_key=f"bad-{case}",
        )
    after = _kinetic_objects(backend)
    assert {kind: sorted(set(after[kind]) - set(before[kind])) for kind in after} == {
        kind: [] for kind in after
    }
    store = tmp_path / "store"
    assert not store.exists() or not [p for p in store.rglob("*") if p.is_file()]


def test_bad_pod_template_yaml_is_a_config_error(kube: kc.Target, tmp_path: Path) -> None:
    bad = tmp_path / "pod.yaml"
    bad.write_text("containers: [name: runner\n")
    with pytest.raises(kc.ConfigError, match="not valid YAML"):
        kc.submit(k8s_fns.square, (1,), target=kube.merge({"pod_template": str(bad)}))
