"""End to end: real Airflow 3 ``dag.test()`` (triggers run inline) on the local backend."""

from __future__ import annotations

import copy
import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest
from helpers import make_context

import kinetic_core as kc


def run(dagbag: Any, dag_id: str, **kwargs: Any) -> tuple[Any, dict[tuple[str, int], Any]]:
    dr = dagbag.get_dag(dag_id).test(**kwargs)
    tis = {(ti.task_id, ti.map_index): ti for ti in dr.get_task_instances()}
    return dr, tis


def xcom(ti: Any, key: str = "return_value") -> Any:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (
            session.query(XComModel)
            .filter_by(
                dag_id=ti.dag_id,
                task_id=ti.task_id,
                run_id=ti.run_id,
                map_index=ti.map_index,
                key=key,
            )
            .one_or_none()
        )
        return None if row is None else XComModel.deserialize_value(row)


def test_value_through_xcom(dagbag: Any) -> None:
    dr, tis = run(dagbag, "kt_value")
    assert dr.state == "success"
    ti = tis[("add", -1)]
    assert ti.state == "success"
    assert xcom(ti) == 5
    job_id = xcom(ti, "job_id")
    assert job_id and kc.attach(job_id).state().status is kc.JobStatus.SUCCEEDED
    # local backend, local storage: no web page, so no link (Airflow shows none, not an empty one)
    for key in ("kinetic_job_url", "kinetic_logs_url", "kinetic_files_url"):
        assert not xcom(ti, key)


def test_remote_failure_fails_the_run_with_traceback(
    dagbag: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    dr, tis = run(dagbag, "kt_failure")
    assert dr.state == "failed"
    assert tis[("explode", -1)].state == "failed"
    out = "".join(capfd.readouterr())
    assert "ValueError: boom-kt_failure" in out
    assert 'raise ValueError(f"boom-{tag}")' in out  # remote traceback
    assert "reason: Error" in out and "last 50 log lines" in out and "about to fail" in out


def test_result_reference(dagbag: Any) -> None:
    dr, tis = run(dagbag, "kt_reference")
    assert dr.state == "success"
    ref = xcom(tis[("big", -1)])
    assert set(ref) == {"job_id", "result_uri", "output_dir", "storage"}
    assert ref["result_uri"].endswith("/result.pkl")
    value = kc.attach(ref["job_id"]).result()
    assert value["rows"] == list(range(1000))


def test_non_deferrable(dagbag: Any) -> None:
    dr, tis = run(dagbag, "kt_nondeferrable")
    assert dr.state == "success"
    assert xcom(tis[("add", -1)]) == 42


def test_task_kinetic_decorator_with_upstream_xcom(dagbag: Any) -> None:
    import os

    dr, tis = run(dagbag, "kt_decorator")
    assert dr.state == "success"
    value = xcom(tis[("evaluate", -1)])
    assert value["total"] == 200  # 2 * (1+2+3+4) * 10
    assert value["pid"] != os.getpid()  # the body ran remotely
    job = kc.attach(xcom(tis[("evaluate", -1)], "job_id"))
    assert job.tags["stage"] == "eval"


def test_dynamic_mapping(dagbag: Any) -> None:
    dr, tis = run(dagbag, "kt_mapped")
    assert dr.state == "success"
    assert [xcom(tis[("shard", i)]) for i in range(3)] == [0, 1, 4]
    assert len({xcom(tis[("shard", i)], "job_id") for i in range(3)}) == 3


def _sleep_then(value: int, seconds: float) -> int:
    import time

    time.sleep(seconds)
    return value


def test_sensor_on_job_submitted_outside_the_dag(dagbag: Any) -> None:
    handle = kc.submit(_sleep_then, (7, 1.0), name="outside")
    dr, tis = run(dagbag, "kt_sensor", run_conf={"job_id": handle.job_id})
    assert dr.state == "success"
    assert xcom(tis[("wait", -1)]) == 7
    assert handle.result() == 7  # the owner can still collect it


def test_sensor_on_failed_job_fails(dagbag: Any) -> None:
    handle = kc.submit(_raise, name="outside-fail")
    handle.wait(60)
    dr, tis = run(dagbag, "kt_sensor", run_conf={"job_id": handle.job_id})
    assert dr.state == "failed"
    assert tis[("wait", -1)].state == "failed"


def _raise() -> None:
    raise RuntimeError("outside failure")


def test_batch_operator(dagbag: Any, capfd: pytest.CaptureFixture[str]) -> None:
    dr, tis = run(dagbag, "kt_batch")
    assert dr.state == "success"
    ti = tis[("sweep", -1)]
    assert xcom(ti) == [1, 4, 9]
    assert xcom(ti, "group_id")
    out = "".join(capfd.readouterr())
    for i in range(3):  # the trigger streamed each child's log line, prefixed with its index
        assert f"[child {i}] squaring {i + 1}" in out


def test_batch_operator_failure_shows_partial_results(
    dagbag: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    dr, tis = run(dagbag, "kt_batch_failure")
    assert dr.state == "failed"
    assert tis[("sweep", -1)].state == "failed"
    out = "".join(capfd.readouterr())
    assert "1 of 3 jobs failed" in out
    assert "ValueError: two is not allowed" in out
    assert "partial results (None where failed): [1, None, 9]" in out


def test_sensor_in_poke_mode(dagbag: Any) -> None:
    handle = kc.submit(_sleep_then, (11, 1.0), name="outside-poke")
    dr, tis = run(dagbag, "kt_sensor_poke", run_conf={"job_id": handle.job_id})
    assert dr.state == "success"
    assert xcom(tis[("wait", -1)]) == 11


def asset_events(uri: str, run_id: str) -> list[Any]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.uri == uri, AssetEvent.source_run_id == run_id)
            .all()
        )
        return [dict(row.extra or {}) for row in rows]


def register(dagbag: Any, *dag_ids: str) -> None:
    """Write DAGs to the metadata DB as the DAG processor would, which also activates their
    assets."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from conftest import sync_to_db

    DagBundlesManager().sync_bundles_to_db()
    bag = copy.copy(dagbag)
    bag.dags = {dag_id: dagbag.get_dag(dag_id) for dag_id in dag_ids}
    sync_to_db(bag)
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    with create_session() as session:  # a user switched it on
        for dag_id in dag_ids:
            session.query(DagModel).filter_by(dag_id=dag_id).update({"is_paused": False})


def queued_runs(dag_id: str) -> int:
    """Asset-triggered runs the scheduler would create for ``dag_id``."""
    from airflow.models.asset import AssetDagRunQueue
    from airflow.utils.session import create_session

    with create_session() as session:
        return session.query(AssetDagRunQueue).filter_by(target_dag_id=dag_id).count()


def test_outlets_get_an_asset_event_with_the_job_and_its_metrics(
    dagbag: Any, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    register(dagbag, "kt_asset", "kt_asset_consumer")
    before = queued_runs("kt_asset_consumer")
    dr, tis = run(dagbag, "kt_asset")
    assert dr.state == "success"
    [model] = asset_events("kinetic://tests/model", dr.run_id)
    job_id = xcom(tis[("train", -1)], "job_id")
    assert model["job_id"] == job_id and model["attempt"] == 1
    assert model["output_uri"] == "file://" + kc.attach(job_id).output_dir
    assert model["backend"] == "local"
    # what the job used, as recorded once in storage (a local job: 0 chips)
    usage = kc.attach(job_id).usage()
    assert model["usage"] == usage.to_dict()
    assert [(a["job_id"], a["chips"], a["status"]) for a in model["usage"]["attempts"]] == [
        (job_id, 0, "SUCCEEDED")
    ]
    # the task log says so, after the job's success (stdlib logging on 3.0, printed later)
    logged = "".join(capfd.readouterr()).splitlines() + [r.getMessage() for r in caplog.records]
    said = [i for i, line in enumerate(logged) if f"Kinetic job {job_id} usage: 1 attempt" in line]
    done = [i for i, line in enumerate(logged) if f"Kinetic job {job_id} succeeded" in line]
    assert said and done and said[-1] > done[-1], logged[-20:]
    assert "on CPU only (0 chips): 0.00 chip-hours" in logged[said[-1]]
    # numbers only: the checkpoint path and the boolean are not metrics
    assert model["metrics"] == {"r2": 0.93, "loss": 0.05, "epochs": 3}
    [report] = asset_events("kinetic://tests/report", dr.run_id)
    assert report["job_id"] == xcom(tis[("report", -1)], "job_id")
    assert "metrics" not in report
    # the DAG scheduled on the model asset is queued for a run by this event
    assert queued_runs("kt_asset_consumer") == before + 1


def _sizes(first: str, more: list[str]) -> list[int]:
    return [len(os.listdir(p)) if os.path.isdir(p) else os.path.getsize(p) for p in [first, *more]]


def test_openlineage_reports_data_inputs_the_output_folder_and_a_kinetic_run_facet(
    dagbag: Any, tmp_path: Path
) -> None:
    pytest.importorskip("airflow.providers.openlineage")  # installed in the oldest-Airflow env
    from kinetic_airflow import KineticOperator

    (tmp_path / "train.csv").write_text("x\n1\n")
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "a.png").write_bytes(b"png")
    op = KineticOperator(
        task_id="ol",
        python_callable=_sizes,
        op_args=[kc.Data(str(tmp_path / "train.csv"))],
        op_kwargs={"more": [kc.Data(f"file://{tmp_path}/images"), kc.Data("train.csv")]},
        target={"spot": True, "accelerator": "cpu"},
        deferrable=False,
    )
    assert op.get_openlineage_facets_on_complete(None) is None  # nothing ran: default lineage
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)  # Data("train.csv"): relative to where the task runs
        handle = op.submit(make_context(), op.resolve_target())
        assert handle.result(timeout=60) == [4, 1, 4]
        lineage = op.get_openlineage_facets_on_complete(None)
    # each Data argument once (train.csv twice: one dataset), then the output folder
    assert [(d.namespace, d.name) for d in lineage.inputs] == [
        ("file", str(tmp_path / "train.csv")),
        ("file", str(tmp_path / "images")),
    ]
    [output] = lineage.outputs
    assert (output.namespace, output.name) == ("file", handle.output_dir)
    facet = lineage.run_facets["kinetic"]
    assert (facet.jobId, facet.backend, facet.attempt, facet.recoveries) == (
        handle.job_id,
        "local",
        1,
        0,
    )
    assert facet.spot is True and facet.accelerator == "cpu"
    from openlineage.client.serde import Serde

    assert '"recoveries": 0' in Serde.to_json(facet)


def test_a_lost_job_recovers_with_one_success_and_no_retry_consumed(
    dagbag: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KT_RECOVERY_DIR", str(tmp_path))
    dr, tis = run(dagbag, "kt_recovery")
    ti = tis[("train", -1)]
    assert dr.state == "success" and ti.state == "success"
    assert ti.try_number == 1  # one try: the recovery is not an Airflow retry
    assert xcom(ti) == "resumed from step 5"
    state = kc.attach(xcom(ti, "job_id")).state()
    assert (state.status, state.recoveries, state.attempt) == (kc.JobStatus.SUCCEEDED, 1, 2)
    assert len((tmp_path / "starts").read_text().splitlines()) == 2
    assert "recovered 1x, now attempt 2" in "".join(capfd.readouterr())
    if importlib.util.find_spec("airflow.providers.openlineage"):  # the lineage says so too
        op = copy.copy(dagbag.get_dag("kt_recovery").get_task("train"))
        op._handle = kc.attach(xcom(ti, "job_id"))
        facet = op.get_openlineage_facets_on_complete(None).run_facets["kinetic"]
        assert (facet.attempt, facet.recoveries) == (2, 1)
