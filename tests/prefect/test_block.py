"""The KineticConfig block: its UI metadata, every Target option, and a kubeconfig kept secret."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import fns
import pytest
from helpers import flow_run_logs
from kinetic_prefect import KineticConfig, kinetic_task
from prefect import flow
from prefect.client.orchestration import get_client

import kinetic_core as kc

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: very-secret-token-123}}]
contexts: [{name: ctx, context: {cluster: c, user: u}}]
current-context: ctx
"""
KUBE_OPTIONS = {
    "backend": "kubernetes",
    "namespace": "ml",
    "image": "ghcr.io/me/train:1",
    "in_cluster": True,
    "kube_context": "ctx",
    "node_selector": {"cloud.google.com/gke-nodepool": "tpu"},
    "tolerations": [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}],
    "labels": {"team": "ml"},
    "annotations": {"owner": "nightly"},
    "pickle_by_value": ["mylib"],
    "env": {"MODE": "nightly", "WANDB_*": None},
    "secret_env": {"WANDB_API_KEY": "wandb/api-key"},
    "env_from": [{"config_map": "settings", "prefix": "APP_"}],
    "volumes": {"/dev/shm": {"empty_dir": {"medium": "Memory", "size_limit": "16Gi"}}},
    "image_pull_policy": "Always",
    "image_pull_secrets": ["registry"],
    "priority_class": "batch",
    "affinity": {"nodeAffinity": {}},
    "security_context": {"runAsUser": 1000},
    "termination_grace_period": 30,
    "ttl_after_finished": 3600,
    "active_deadline": 7200,
    "pod_template": {"containers": [{"name": "log-shipper", "image": "fluent-bit"}]},
}


def test_block_type_has_logo_and_documentation_url_on_the_server() -> None:
    KineticConfig.register_type_and_schema()
    with get_client(sync_client=True) as client:
        block_type = client.read_block_type_by_slug("kinetic-config")
    assert str(block_type.logo_url).startswith("https://")
    assert str(block_type.documentation_url).startswith("https://")
    assert str(block_type.documentation_url).rstrip("/").endswith("prefect")
    assert block_type.code_example and "KineticConfig.load" in block_type.code_example


def test_block_round_trip_carries_every_kubernetes_option() -> None:
    KineticConfig(**KUBE_OPTIONS, kubeconfig="/etc/kube/config").save("kube", overwrite=True)
    loaded = KineticConfig.load("kube")
    target = loaded.to_target()
    assert target == kc.Target(**KUBE_OPTIONS, kubeconfig="/etc/kube/config")


def test_kubeconfig_content_stays_in_memory_never_persisted_or_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kinetic_storage: str
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    KineticConfig(storage=kinetic_storage, kubeconfig_content=KUBECONFIG).save(
        "with-kubeconfig", overwrite=True
    )
    with get_client(sync_client=True) as client:
        stored = client.read_block_document_by_name(
            "with-kubeconfig", "kinetic-config", include_secrets=False
        )
    assert "very-secret-token" not in json.dumps(stored.data, default=str)

    target = KineticConfig.load("with-kubeconfig").to_target()
    assert target.kubeconfig == KUBECONFIG  # passed through: the core resolves it
    reference = "kubeconfig-sha256:" + hashlib.sha256(KUBECONFIG.encode()).hexdigest()
    assert target.to_dict()["kubeconfig"] == reference
    assert "very-secret-token" not in target.to_json() + repr(target)

    # A task using the block (local backend: the kubeconfig is carried, not used).
    add = kinetic_task(fns.add, config="with-kubeconfig", log_interval=0.3)

    @flow
    def uses_block() -> int:
        return add(1, 2)

    state = uses_block(return_state=True)
    assert state.result() == 3
    (job,) = kc.list_jobs()
    handle_json = Path(kinetic_storage[len("file://") :]) / f"jobs/{job.job_id}/handle.json"
    assert reference in handle_json.read_text()  # the handle names the content...
    assert "very-secret-token" not in handle_json.read_text()  # ...never holds it
    logs = "\n".join(flow_run_logs(state.state_details.flow_run_id))
    assert "very-secret-token" not in logs
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written and not any(b"very-secret-token" in p.read_bytes() for p in written)


def test_kubeconfig_path_and_content_together_or_empty_content_are_config_errors() -> None:
    with pytest.raises(kc.ConfigError, match="either"):
        KineticConfig(kubeconfig="/etc/kube/config", kubeconfig_content=KUBECONFIG).to_target()
    with pytest.raises(kc.ConfigError, match="empty"):
        KineticConfig(kubeconfig_content="  ").to_target()
