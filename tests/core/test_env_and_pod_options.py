"""Target.env on the local backend (literal values, wildcard captures) and the pod options
as plain data: JSON round trip, ``KINETIC_*`` parsing and typed errors before any write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kinetic_core as kc
from tests.core import jobfns


def _written(storage_uri: str) -> list[Path]:
    root = Path(storage_uri[7:])
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


def test_local_job_gets_literal_and_pattern_captured_env(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WANDB_PROJECT", "nightly")
    monkeypatch.setenv("WANDB_API_KEY", "s3cret-value")
    env = {"MODE": "production", "WANDB_*": None}
    job = kc.submit(
        jobfns.echo_env,
        ("MODE", "WANDB_PROJECT", "WANDB_API_KEY"),
        target={"env": env},
    )
    assert job.result(timeout=60) == {
        "MODE": "production",
        "WANDB_PROJECT": "nightly",
        "WANDB_API_KEY": "s3cret-value",
    }
    handle = Path(storage_uri[7:], "jobs", job.job_id, "handle.json")
    if handle.exists():  # result() cleaned up: the handle is gone, nothing to search
        assert "s3cret-value" not in handle.read_text()


def test_a_list_of_patterns_captures_like_the_seeds(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf")
    job = kc.submit(jobfns.echo_env, ("HF_TOKEN",), target={"env": ["HF_*", "NO_MATCH_*"]})
    assert job.result(timeout=60) == {"HF_TOKEN": "hf"}


def test_pod_options_round_trip_as_json_and_from_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = kc.Target(
        env={"A": "1", "B_*": None},
        secret_env={"TOKEN": "creds/token"},
        volumes={"/dev/shm": {"empty_dir": {"medium": "Memory", "size_limit": "16Gi"}}},
        pod_template="~/pod.yaml",
        termination_grace_period=30,
    )
    assert kc.Target.from_json(target.to_json()) == target
    monkeypatch.setenv("KINETIC_ENV", '{"A": "1"}')
    monkeypatch.setenv("KINETIC_VOLUMES", '{"/data": {"pvc": "claim"}}')
    monkeypatch.setenv("KINETIC_POD_TEMPLATE", "/etc/kinetic/pod.yaml")
    monkeypatch.setenv("KINETIC_TERMINATION_GRACE_PERIOD", "15")
    resolved = kc.Target().resolve()
    assert resolved.env == {"A": "1"} and resolved.volumes == {"/data": {"pvc": "claim"}}
    assert resolved.pod_template == "/etc/kinetic/pod.yaml"
    assert resolved.termination_grace_period == 15


def test_kubeconfig_content_is_never_serialized() -> None:
    content = "apiVersion: v1\nclusters: []\nusers:\n- name: u\n  user: {token: tok-123}\n"
    target = kc.Target(backend="kubernetes", kubeconfig=content)
    for text in (repr(target), target.to_json(), json.dumps(target.to_dict())):
        assert "tok-123" not in text
    assert target.to_dict()["kubeconfig"].startswith("kubeconfig-sha256:")
    assert kc.Target(kubeconfig="/home/me/.kube/config").to_dict()["kubeconfig"] == (
        "/home/me/.kube/config"
    )
    assert target.to_dict(include_secrets=True)["kubeconfig"] == content


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"env": "WANDB_API_KEY"}, "env must be a list"),
        ({"env": {"A": 1}}, "quote it"),
        ({"env": {"A B": None}}, "not an environment variable name"),
        ({"secret_env": {"TOKEN": "no-slash"}}, "secret-name/key"),
        ({"secret_env": {"TOKEN": "creds/"}}, "secret-name/key"),
        ({"env_from": [{"secret": "a", "config_map": "b"}]}, "is not a source"),
        ({"volumes": {"/a": {"pvc": "x"}, "/a/": {"pvc": "y"}}}, "mount path '/a' is used twice"),
        ({"volumes": {"/a": {"empty_dir": {"medium": "Disk"}}}}, "empty_dir"),
        ({"image_pull_secrets": "creds"}, "image_pull_secrets"),
        ({"ttl_after_finished": 1.5}, "ttl_after_finished"),
        ({"active_deadline": 0}, "active_deadline"),
        ({"security_context": ["runAsUser"]}, "security_context"),
        ({"pod_template": 3}, "pod_template"),
    ],
)
def test_bad_pod_options_are_config_errors_before_any_write(
    storage_uri: str, options: dict[str, object], message: str
) -> None:
    with pytest.raises(kc.ConfigError, match=message):
        kc.submit(jobfns.add, (1,), target=options)
    assert _written(storage_uri) == []
