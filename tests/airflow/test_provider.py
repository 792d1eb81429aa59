"""Provider metadata, the connection -> Target mapping and the decorator's parse-time checks."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from kinetic_airflow.compat import AirflowNotFoundException
from kinetic_airflow.hooks import KineticHook
from kinetic_airflow.provider_info import get_provider_info

import kinetic_core as kc


def test_provider_is_registered_with_airflow() -> None:
    from airflow.providers_manager import ProvidersManager

    pm = ProvidersManager()
    assert "kinetic-workflows" in pm.providers
    assert pm.hooks["kinetic"].hook_class_name == "kinetic_airflow.hooks.KineticHook"
    assert "kinetic_airflow.links.KineticJobLink" in pm.extra_links_class_names
    assert any(t.package_name == "kinetic-workflows" for t in pm.trigger)
    assert "kinetic" in pm.taskflow_decorators
    info = get_provider_info()
    fields = info["connection-types"][0]["conn-fields"]
    assert {"backend", "storage", "namespace", "kube_context", "in_cluster", "project"} <= set(
        fields
    )


def test_missing_default_connection_falls_back_to_env_and_defaults(storage: str) -> None:
    target = KineticHook().get_target({"accelerator": "gpu-l4"})
    assert target.accelerator == "gpu-l4"
    resolved = target.resolve()
    assert resolved.backend == "local" and resolved.storage == storage


def test_unknown_named_connection_is_a_clear_error() -> None:
    with pytest.raises(AirflowNotFoundException, match="'nope' is not defined"):
        KineticHook("nope").get_target()


def test_connection_to_target(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    conn = {
        "conn_type": "kinetic",
        "password": "s3cret",
        "extra": {
            "storage": f"file://{tmp_path}",
            "backend": "local",
            "accelerator": "tpu-v5e-8",
            "spot": True,
            "namespace": "",
            "life_span": 3600,
        },
    }
    monkeypatch.setenv("AIRFLOW_CONN_KINETIC_PROD", json.dumps(conn))
    target = KineticHook("kinetic_prod").get_target({"spot": False})
    assert target.storage == f"file://{tmp_path}" and target.accelerator == "tpu-v5e-8"
    assert target.spot is False and target.life_span == 3600 and target.namespace is None
    assert target.signing_key == "s3cret" and "s3cret" not in target.to_json()
    assert KineticHook("kinetic_prod").test_connection()[0]


def test_connection_with_unknown_option_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = {"conn_type": "kinetic", "extra": {"acclerator": "tpu"}}
    monkeypatch.setenv("AIRFLOW_CONN_KINETIC_TYPO", json.dumps(conn))
    with pytest.raises(kc.ConfigError, match=r"kinetic_typo.*acclerator"):
        KineticHook("kinetic_typo").get_target()


def test_decorator_splits_target_options_from_operator_arguments() -> None:
    from airflow.sdk import DAG, task

    with DAG("deco_parse", schedule=None):

        @task.kinetic(accelerator="gpu-l4", spot=True, retries=2, result="reference")
        def fit(x: int) -> int:
            return x

        op = fit(1).operator
    assert op.target == {"accelerator": "gpu-l4", "spot": True}
    assert op.retries == 2 and op.result == "reference"
    with pytest.raises(kc.ConfigError):
        task.kinetic(target={"gpu": 1})


def test_example_dag_parses() -> None:
    from pathlib import Path

    from conftest import dag_bag

    bag = dag_bag(Path(__file__).parents[2] / "dags_examples" / "nightly_training.py")
    assert not bag.import_errors, bag.import_errors
    dag = bag.get_dag("nightly_training")
    assert set(dag.task_ids) == {"prepare", "train", "evaluate", "publish", "report"}
    assert dag.get_task("train").target["accelerator"] == "tpu-v5e-8"
    # Nothing short-circuits: report runs after every run, published or not.
    assert dag.get_task("report").trigger_rule == "all_done"


def documentation_project_url() -> str | None:
    from importlib.metadata import metadata

    for entry in metadata("kinetic-workflows").get_all("Project-URL") or []:
        name, _, url = entry.partition(",")
        if name.strip().lower() == "documentation":
            return url.strip()
    return None


def test_providers_get_shows_a_description_and_the_docs_url() -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    from kinetic_airflow.provider_info import DOCS_URL

    assert DOCS_URL.startswith("https://") and DOCS_URL.endswith("/airflow/")
    airflow = Path(sys.executable).with_name("airflow")
    out = subprocess.run(
        [str(airflow), "providers", "get", "kinetic-workflows", "--full", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=240,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert out.returncode == 0, out.stderr
    [shown] = json.loads(out.stdout[out.stdout.index("[{") :])  # 3.0 logs to stdout first
    assert "detached, reattachable jobs" in shown["description"]
    # Airflow 3.0.6 shows the provider info's URL; 3.1.8, 3.2.2 and 3.3 the package's
    # "Documentation" Project-URL, which 3.1 and 3.2 show with the space after its comma
    assert shown["documentation-url"].strip() in {DOCS_URL, documentation_project_url()}
    assert shown["integrations"][0]["external-doc-url"] == DOCS_URL


def test_connection_form_fields() -> None:
    fields = get_provider_info()["connection-types"][0]["conn-fields"]
    assert fields["backend"]["schema"]["enum"] == [None, *kc.BACKENDS]  # a choice, may stay unset
    assert fields["spot"]["schema"]["type"] == ["boolean", "null"]
    assert fields["life_span"]["schema"]["type"] == ["number", "null"]
    assert {"accelerator", "kubeconfig"} <= set(fields)
    # every field maps to a Target option, and none has a default the form would prefill
    assert set(fields) <= {f.name for f in dataclasses.fields(kc.Target)}
    assert not any("default" in field["schema"] for field in fields.values())
