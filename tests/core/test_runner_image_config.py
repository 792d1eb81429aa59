"""The runner image and ``requirements=`` as configuration: refused or accepted before
anything is created (no cluster is contacted: the Job is built, not sent)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.backends import get_backend
from kinetic_core.backends.kubernetes.image import CACHE_PATH, DEFAULT_IMAGE
from kinetic_core.control.launching import launch_spec
from kinetic_core.runtime.bootstrap import CACHE_ENV, REQUIREMENTS_ENV
from tests.core import jobfns


def _kubeconfig(tmp_path: Path, server: str) -> str:
    path = tmp_path / f"kubeconfig-{abs(hash(server))}"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return str(path)


def _runner_container(target: kc.Target) -> dict[str, object]:
    resolved = target.resolve()
    spec = launch_spec("job-abc", resolved.storage or "", resolved, {})
    backend = get_backend(resolved)
    from kinetic_core.backends.kubernetes.manifest import job_manifest

    backend.check_launch(spec)  # type: ignore[attr-defined]
    pod = job_manifest(spec, "default")["spec"]["template"]["spec"]
    return dict(pod["containers"][0]) | {"_pod": pod}


def test_no_image_for_a_remote_cluster_is_a_config_error_before_anything_is_written(
    storage_uri: str, tmp_path: Path
) -> None:
    """Before: the Job was created with the unqualified default tag, which no GKE node can
    pull: the job sat in ImagePullBackOff."""
    target = kc.Target(
        backend="gke", kubeconfig=_kubeconfig(tmp_path, "https://203.0.113.10"), namespace="ml"
    )
    with pytest.raises(kc.ConfigError) as caught:
        kc.submit(jobfns.add, (1, 2), target=target)
    text = str(caught.value)
    assert "image=" in text and "KINETIC_IMAGE" in text and "Dockerfile" in text
    assert "docker build" in text and "docker push" in text and "203.0.113.10" in text
    root = Path(storage_uri[len("file://") :])
    assert not (root / "jobs").exists() or not any((root / "jobs").iterdir())


@pytest.mark.parametrize("server", ["https://127.0.0.1:6443", "https://localhost:8443"])
def test_a_local_cluster_keeps_the_default_image(tmp_path: Path, server: str) -> None:
    target = kc.Target(backend="kubernetes", kubeconfig=_kubeconfig(tmp_path, server))
    assert _runner_container(target)["image"] == DEFAULT_IMAGE


def test_an_image_from_the_target_or_the_pod_template_needs_no_local_cluster(
    tmp_path: Path,
) -> None:
    remote = _kubeconfig(tmp_path, "https://203.0.113.10")
    target = kc.Target(backend="gke", kubeconfig=remote, image="r.example/kinetic:1")
    assert _runner_container(target)["image"] == "r.example/kinetic:1"
    template = {"containers": [{"name": "runner", "image": "r.example/mine:2"}]}
    target = kc.Target(backend="gke", kubeconfig=remote, pod_template=template)
    assert _runner_container(target)["image"] == "r.example/mine:2"


def test_requirements_run_the_bootstrap_with_a_cache_volume(tmp_path: Path) -> None:
    remote = _kubeconfig(tmp_path, "https://203.0.113.10")
    target = kc.Target(backend="gke", kubeconfig=remote, image="i:1", requirements=["six>=1"])
    runner = _runner_container(target)
    assert runner["command"][:3] == ["python", "-m", "kinetic_core.runtime.bootstrap"]  # type: ignore[index]
    assert runner["command"][3:5] == ["-m", "kinetic_core.runtime.runner"]  # type: ignore[index]
    env = {e["name"]: e.get("value") for e in runner["env"]}  # type: ignore[attr-defined]
    assert json.loads(env[REQUIREMENTS_ENV]) == ["six>=1"] and env[CACHE_ENV] == CACHE_PATH
    assert {"name": "kinetic-env-cache", "mountPath": CACHE_PATH} in runner["volumeMounts"]  # type: ignore[operator]
    pod = runner["_pod"]
    assert {"name": "kinetic-env-cache", "emptyDir": {}} in pod["volumes"]  # type: ignore[index]


def test_a_cache_volume_of_the_target_replaces_the_empty_dir(tmp_path: Path) -> None:
    remote = _kubeconfig(tmp_path, "https://203.0.113.10")
    target = kc.Target(
        backend="gke",
        kubeconfig=remote,
        image="i:1",
        requirements=["six"],
        volumes={CACHE_PATH: {"pvc": "kinetic-envs"}},
    )
    runner = _runner_container(target)
    pod = runner["_pod"]
    assert [v for v in pod["volumes"] if "emptyDir" in v] == []  # type: ignore[index]
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]]  # type: ignore[index]
    assert claims == ["kinetic-envs"]
    assert [m["mountPath"] for m in runner["volumeMounts"]] == [CACHE_PATH]  # type: ignore[attr-defined]


def test_without_requirements_the_runner_starts_directly(tmp_path: Path) -> None:
    target = kc.Target(backend="kubernetes", kubeconfig=_kubeconfig(tmp_path, "https://[::1]:1"))
    runner = _runner_container(target)
    assert runner["command"][:3] == ["python", "-m", "kinetic_core.runtime.runner"]  # type: ignore[index]
    assert "volumeMounts" not in runner


@pytest.mark.parametrize(
    "bad", [[], "six", ["six", ""], ["six", 3], ["six\n--index-url=x"], ["--pre"]]
)
def test_bad_requirements_are_config_errors(bad: object) -> None:
    with pytest.raises(kc.ConfigError, match="requirements"):
        kc.Target(backend="kubernetes", requirements=bad).resolve(environ={})  # type: ignore[arg-type]


def test_requirements_from_the_environment() -> None:
    env = {"KINETIC_REQUIREMENTS": '["six>=1,<2", "tabulate"]'}
    assert kc.Target().resolve(environ=env).requirements == ["six>=1,<2", "tabulate"]
    env = {"KINETIC_REQUIREMENTS": "six, tabulate"}
    assert kc.Target().resolve(environ=env).requirements == ["six", "tabulate"]
    assert kc.Target.from_json(kc.Target(requirements=["six"]).to_json()).requirements == ["six"]


def test_the_server_read_once_follows_a_kubeconfig_rewritten_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The API server is remembered per set of credentials (issue 37: the kubeconfig was
    parsed twice per submit); a kubeconfig file rewritten to name another server, or
    another file in KUBECONFIG, is read again."""
    from kinetic_core.backends.kubernetes import image

    local = _kubeconfig(tmp_path, "https://127.0.0.1:6443")
    remote = _kubeconfig(tmp_path, "https://203.0.113.10")
    target = kc.Target(backend="kubernetes", kubeconfig=local)
    assert image.api_server(target) == "https://127.0.0.1:6443"
    assert image.api_server(target) == "https://127.0.0.1:6443"  # remembered
    Path(local).write_text(Path(remote).read_text() + " ")  # another server, in place
    assert image.api_server(target) == "https://203.0.113.10"
    monkeypatch.setenv("KUBECONFIG", _kubeconfig(tmp_path, "https://localhost:8443"))
    assert image.api_server(kc.Target(backend="kubernetes")) == "https://localhost:8443"
    monkeypatch.setenv("KUBECONFIG", remote)
    assert image.api_server(kc.Target(backend="kubernetes")) == "https://203.0.113.10"
