"""The KineticConfig block: its UI metadata, every Target option, and a kubeconfig kept secret."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import fns
import pytest
from helpers import flow_run_logs
from kinetic_prefect import KineticConfig, kinetic_task
from kinetic_prefect.blocks import HANDLED_APART
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
#: Options a job on the local backend cannot take as their example says (the examples
#: name a cluster, a bucket and a module this machine lacks): local values of the same type.
LOCAL_RUN = {"backend": "local", "pickle_by_value": ["fns"]}


def every_option() -> dict[str, object]:
    """Each Target option with its example value (the secrets as their block fields take them)."""
    values = {o.name: o.example for o in kc.target_options()}
    missing = sorted(name for name, value in values.items() if value is None)
    assert not missing, f"give {missing} an example in kinetic_core/config/options.py"
    return values


def test_block_type_has_logo_and_documentation_url_on_the_server() -> None:
    KineticConfig.register_type_and_schema()
    with get_client(sync_client=True) as client:
        block_type = client.read_block_type_by_slug("kinetic-config")
    assert str(block_type.logo_url).startswith("https://")
    assert str(block_type.documentation_url).startswith("https://")
    assert str(block_type.documentation_url).rstrip("/").endswith("prefect")
    assert block_type.code_example and "KineticConfig.load" in block_type.code_example


def test_every_target_option_is_a_block_field_or_handled_apart() -> None:
    """Fails when a Target option is neither a block field nor named in HANDLED_APART."""
    fields = set(KineticConfig.model_fields)
    for option in kc.target_options():
        assert option.name in fields or option.name in HANDLED_APART, option.name
        if option.secret:  # a secret is saved only in a secret field
            assert option.name in HANDLED_APART, option.name
    assert set(HANDLED_APART) <= {o.name for o in kc.target_options()}


def test_every_option_round_trips_through_a_saved_block_into_the_submitted_job(
    kinetic_storage: str, tmp_path: Path
) -> None:
    values = every_option()
    KineticConfig(**values).save("every-option", overwrite=True)
    loaded = KineticConfig.load("every-option")
    assert loaded.to_target() == kc.Target(**values)  # types too: ints, floats, lists, dicts
    assert isinstance(loaded.to_target().max_recoveries, int)

    local = {
        **LOCAL_RUN,
        "storage": kinetic_storage,
        "local_dir": str(tmp_path / "records"),
        # the example's bucket is not reachable here, and a submit checks its output_dir
        "output_dir": f"file://{tmp_path / 'outputs'}",
    }
    KineticConfig(**{**values, **local}).save("every-option-local", overwrite=True)
    add = kinetic_task(fns.add, config="every-option-local", log_interval=0.3)

    @flow
    def uses_every_option() -> int:
        return add(1, 2)

    assert uses_every_option() == 3
    (job,) = kc.list_jobs()
    submitted = {**values, **local, "kubeconfig": values["kubeconfig"]}
    del submitted["signing_key"]  # never in a handle
    assert job.target == {**submitted, "storage": job.storage}


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


def test_block_saves_the_recovery_policy() -> None:
    KineticConfig(max_recoveries=2, recover_on_exit_codes=[75, 143]).save(
        "recovering", overwrite=True
    )
    target = KineticConfig.load("recovering").to_target()
    assert (target.max_recoveries, target.recover_on_exit_codes) == (2, [75, 143])
