"""A signing key given to an operator never reaches what Airflow renders, stores or logs.

Real ``dag.test()`` runs of signed jobs on the local backend; afterwards the key must not
appear in Airflow's metadata database (rendered template fields, XComs, the serialized
DAG, trigger rows: the whole SQLite file is searched), in the task output, nor in the
job's stored handle, while the jobs did run signed.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG
from kinetic_airflow import KineticOperator

import kinetic_core as kc

KEY = hashlib.sha256(b"kinetic airflow test signing key").hexdigest()  # dags/kinetic_signed_dags.py
START = {"schedule": None, "catchup": False}


def add(a: int, b: int) -> int:
    return a + b


def _db_file() -> Path:
    url = os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    return Path(url.removeprefix("sqlite:///"))


def _rendered_fields(dag_id: str) -> list[Any]:
    from airflow.models.renderedtifields import RenderedTaskInstanceFields as RTIF
    from airflow.utils.session import create_session

    with create_session() as session:
        return [row.rendered_fields for row in session.query(RTIF).filter_by(dag_id=dag_id)]


def _xcoms(dag_id: str) -> list[Any]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(XComModel).filter_by(dag_id=dag_id).all()
        return [XComModel.deserialize_value(row) for row in rows]


@pytest.mark.timeout(240)
def test_signing_key_stays_out_of_rendered_fields_xcom_logs_and_handles(
    dagbag: Any, storage: str, capfd: pytest.CaptureFixture[str]
) -> None:
    jobs = Path(storage.removeprefix("file://")) / "jobs"
    dr = dagbag.get_dag("kt_signed").test()
    tis = {ti.task_id: ti for ti in dr.get_task_instances()}
    assert dr.state == "success", {t: ti.state for t, ti in tis.items()}

    rendered = _rendered_fields("kt_signed")
    assert len(rendered) == 6 and all("target" in fields for fields in rendered)
    assert KEY not in json.dumps(rendered, default=str)
    xcoms = _xcoms("kt_signed")
    results = [x for x in xcoms if isinstance(x, dict)]
    assert sorted(r["sum"] for r in results) == [5, 9, 11, 22, 70, 71]
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    assert all(r["key_sha256"] == digest for r in results)  # the jobs ran signed with KEY
    assert KEY not in json.dumps(xcoms, default=str)
    assert KEY.encode() not in _db_file().read_bytes()  # nowhere in Airflow's database
    assert KEY not in "".join(capfd.readouterr())  # nor in the task logs

    job_ids = [x for x in xcoms if isinstance(x, str) and x and (jobs / x).is_dir()]
    assert len(job_ids) == 6
    for job_id in job_ids:
        for record in (jobs / job_id).rglob("*"):  # records, and folders of them (telemetry/)
            if record.is_file():
                assert KEY.encode() not in record.read_bytes(), record


def test_operator_keeps_the_key_out_of_its_templated_target() -> None:
    with DAG(f"kt_parse_{uuid.uuid4().hex[:8]}", **START):
        op = KineticOperator(
            task_id="t", python_callable=add, target=kc.Target(signing_key=KEY, life_span=60)
        )
        from_dict = KineticOperator(
            task_id="d", python_callable=add, target={"signing_key": KEY, "life_span": 60}
        )
        from_json = KineticOperator(
            task_id="j", python_callable=add, target=json.dumps({"signing_key": KEY})
        )
    for operator in (op, from_dict, from_json):
        fields = {name: getattr(operator, name) for name in operator.template_fields}
        assert KEY not in json.dumps(fields, default=str)
        assert KEY not in repr(operator.target)
        assert operator.resolve_target().signing_key == KEY  # still used to sign


def test_a_key_that_appears_only_when_rendered_is_refused_with_what_to_do() -> None:
    from kinetic_airflow import KineticJobSensor
    from kinetic_airflow.compat import AirflowFailException  # its home differs before 3.2

    with DAG(f"kt_render_{uuid.uuid4().hex[:8]}", **START):
        op = KineticOperator(task_id="t", python_callable=add, target="{{ var.value.target }}")
        sensor = KineticJobSensor(task_id="s", job_id="x00", target={"signing_key": KEY})
    assert sensor.target == {} and KEY not in json.dumps(sensor.target)
    op.target = json.dumps({"signing_key": "rendered-key"})  # what rendering produced
    with pytest.raises(AirflowFailException, match="connection's password"):
        op.resolve_target()
