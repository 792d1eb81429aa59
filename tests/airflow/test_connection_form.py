"""The kinetic connection form: every Target option a user saves is a field Airflow's UI
renders, and what the form saves reaches the Target a job is submitted with."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from helpers import make_context
from kinetic_airflow import KineticOperator
from kinetic_airflow.hooks import KineticHook
from kinetic_airflow.provider_info import HANDLED_APART, get_provider_info

import kinetic_core as kc


def kinetic_form_fields() -> dict[str, Any]:
    """The extra fields Airflow's UI API serves for the kinetic connection type (Airflow
    caches them per process; 3.1 cannot build them twice: its wtforms mock stays behind)."""
    from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService

    [meta] = [m for m in HookMetaService.hook_meta_data() if m.connection_type == "kinetic"]
    return dict(meta.extra_fields or {})


def form_reads_provider_info() -> bool:
    """Airflow 3.2+ builds connection forms from the provider's ``conn-fields``; 3.0 and
    3.1 show the Extra JSON only (docs/airflow.md, "Connection form fields")."""
    from airflow.providers_manager import ProvidersManager

    return hasattr(ProvidersManager, "_load_ui_metadata")


def test_the_form_has_the_recovery_policy() -> None:
    fields = kinetic_form_fields()
    if not form_reads_provider_info():  # the Extra JSON carries it (round trip below)
        assert fields == {}
        fields = get_provider_info()["connection-types"][0]["conn-fields"]
    assert fields["max_recoveries"]["schema"]["type"] == ["integer", "null"]
    assert fields["recover_on_exit_codes"]["schema"]["type"] == ["array", "null"]


def every_option() -> dict[str, Any]:
    """Each Target option with its example value, as the form saves it (typed JSON)."""
    values = {o.name: o.example for o in kc.target_options()}
    missing = sorted(name for name, value in values.items() if value is None)
    assert not missing, f"give {missing} an example in kinetic_core/config/options.py"
    return values


def test_every_target_option_is_a_form_field_or_handled_apart() -> None:
    """Fails when a Target option is neither a form field nor named in HANDLED_APART."""
    fields = kinetic_form_fields()
    if not form_reads_provider_info():
        assert fields == {}
        fields = get_provider_info()["connection-types"][0]["conn-fields"]
    for option in kc.target_options():
        assert (option.name in fields) != (option.name in HANDLED_APART), option.name
        if option.name in fields:
            schema = fields[option.name]["schema"]
            assert schema["type"] == option.json_types, option.name
            assert (schema.get("format") == "password") == option.secret, option.name
    assert set(HANDLED_APART) <= {o.name for o in kc.target_options()}


def submitted_target(monkeypatch: pytest.MonkeyPatch, extra: dict[str, Any], tmp: Path) -> Any:
    """The target of the job a KineticOperator submits with connection ``extra`` (run on
    the local backend: the example values name a cluster and a bucket this machine lacks)."""
    conn = {"conn_type": "kinetic", "password": "s3cret", "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_KINETIC_EVERY", json.dumps(conn))
    op = KineticOperator(
        task_id="every",
        python_callable=sum,
        op_args=[[1, 2]],
        kinetic_conn_id="kinetic_every",
        target={
            "backend": "local",
            "storage": os.environ["KINETIC_STORAGE"],
            "local_dir": str(tmp / "records"),
            "pickle_by_value": [],
            # the example's bucket is not reachable here, and a submit checks its output_dir
            "output_dir": f"file://{tmp / 'outputs'}",
        },
        deferrable=False,
    )
    handle = op.submit(make_context(), op.resolve_target())
    assert handle.result(timeout=60) == 3
    return handle


@pytest.mark.parametrize("saved_as", ["typed", "text"])
def test_every_option_round_trips_through_a_connection_into_the_submitted_job(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, saved_as: str
) -> None:
    values = every_option()
    del values["signing_key"]  # the connection's password
    extra = values
    if saved_as == "text":  # a form (or a person) that saved every value as text
        extra = {k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items()}
    conn = {"conn_type": "kinetic", "password": "s3cret", "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_KINETIC_EVERY", json.dumps(conn))
    target = KineticHook("kinetic_every").get_target()
    assert target == kc.Target(**values, signing_key="s3cret")  # types too

    handle = submitted_target(monkeypatch, extra, tmp_path)
    expected = {**values, "backend": "local", "local_dir": str(tmp_path / "records")}
    expected["output_dir"] = f"file://{tmp_path / 'outputs'}"
    expected["pickle_by_value"] = []
    assert handle.target == {**expected, "storage": handle.storage}
    assert handle.target["max_recoveries"] == 2 and handle.target["recover_on_exit_codes"] == [
        75,
        143,
    ]
