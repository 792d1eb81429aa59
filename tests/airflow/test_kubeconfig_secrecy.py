"""A kubeconfig's content in the kinetic connection never reaches what Airflow renders,
stores or logs, nor the job's stored records: a real ``dag.test()`` run (local backend,
which carries the kubeconfig without using it) and the whole metadata database searched."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import airflow
import pytest
from kinetic_airflow import KineticHook

AIRFLOW_30 = airflow.__version__.startswith("3.0.")
TOKEN = "kubeconfig-bearer-token-7f3a9c"
KUBECONFIG = f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://127.0.0.1:6443"}}}}]
users: [{{name: u, user: {{token: {TOKEN}}}}}]
contexts: [{{name: ctx, context: {{cluster: c, user: u}}}}]
current-context: ctx
"""


@pytest.fixture
def connection(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = {"conn_type": "kinetic", "extra": {"kubeconfig": KUBECONFIG, "kube_context": "ctx"}}
    monkeypatch.setenv("AIRFLOW_CONN_KINETIC_KUBECONFIG", json.dumps(conn))


def test_connection_passes_the_content_through_and_serializes_a_reference(
    connection: None,
) -> None:
    target = KineticHook("kinetic_kubeconfig").get_target()
    assert target.kubeconfig == KUBECONFIG and target.kube_context == "ctx"
    assert TOKEN not in target.to_json() + repr(target)
    assert target.to_dict()["kubeconfig"].startswith("kubeconfig-sha256:")
    ok, message = KineticHook("kinetic_kubeconfig").test_connection()
    assert ok and TOKEN not in message


@pytest.mark.timeout(240)
def test_kubeconfig_stays_out_of_the_database_xcom_logs_and_handles(
    connection: None, dagbag: Any, storage: str, capfd: pytest.CaptureFixture[str]
) -> None:
    dr = dagbag.get_dag("kt_kubeconfig").test()
    tis = {ti.task_id: ti for ti in dr.get_task_instances()}
    assert dr.state == "success", {t: ti.state for t, ti in tis.items()}
    db = Path(os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].removeprefix("sqlite:///"))
    assert TOKEN.encode() not in db.read_bytes()  # rendered fields, XCom, DAG, trigger rows
    out = "".join(capfd.readouterr())  # the task logs
    # Airflow 3.0 itself (not this provider) logs, at DEBUG, the message that registers a
    # connection's extra for masking, value included; 3.1+ omits it. Any other line fails.
    leaks = [line for line in out.splitlines() if TOKEN in line]
    assert all(AIRFLOW_30 and "type='MaskSecret'" in line for line in leaks), leaks
    jobs = Path(storage.removeprefix("file://")) / "jobs"
    records = [p for p in jobs.rglob("*") if p.is_file()] if jobs.exists() else []
    assert not any(TOKEN.encode() in p.read_bytes() for p in records)


async def test_a_trigger_in_a_fresh_triggerer_knows_the_content_from_its_connection(
    connection: None,
) -> None:
    """A triggerer is another process: it never saw the content the worker submitted with.
    Its trigger reads the connection, so the handle's reference resolves there too."""
    from kinetic_airflow import KineticJobTrigger

    import kinetic_core as kc
    import kinetic_core.config.kubeconfig as kube_credentials

    target = KineticHook("kinetic_kubeconfig").get_target({"poll_interval": 0.3})
    job = kc.submit(divmod, (7, 2), target=target)
    reference = job.target["kubeconfig"]
    assert reference.startswith("kubeconfig-sha256:") and TOKEN not in job.to_json()
    kube_credentials._known.clear()  # as in a triggerer process that starts afresh
    assert kube_credentials.kubeconfig_content(reference) is None
    trigger = KineticJobTrigger(
        handle=job.to_json(), kinetic_conn_id="kinetic_kubeconfig", stream_logs=False
    )
    event = (await anext(trigger.run())).payload
    assert event["status"] == "success"
    assert kube_credentials.kubeconfig_content(reference) == KUBECONFIG
