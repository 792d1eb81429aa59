"""The kinetic Airflow plugin: loaded from the ``airflow.plugins`` entry point on every
supported minor, with what that minor supports; the dashboard it mounts answers under its
prefix in Airflow's real api-server app, behind Airflow's auth (SimpleAuthManager with a
user and password); and a local job's extra link opens the job page there."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kinetic_airflow.links import XCOM_KEYS
from kinetic_airflow.plugins import URL_PREFIX, supports

import kinetic_core as kc
from tests.core import jobfns


def _airflow_minor() -> tuple[int, int]:
    import airflow

    major, minor = airflow.__version__.split(".")[:2]
    return int(major), int(minor)


def _loaded() -> tuple[Any, dict[str, str]]:
    """The loaded kinetic plugin and the plugin import errors (the API moved in 3.2)."""
    from airflow import plugins_manager as pm

    pm.ensure_plugins_loaded()
    if hasattr(pm, "_get_plugins"):
        plugins, errors = pm._get_plugins()
    else:  # Airflow 3.0, 3.1
        plugins, errors = pm.plugins, pm.import_errors
    return next((p for p in plugins if p.name == "kinetic"), None), dict(errors)


def test_plugin_loads_with_what_this_minor_supports() -> None:
    plugin, errors = _loaded()
    assert plugin is not None and not errors, errors
    assert supports("external_views") == (_airflow_minor() >= (3, 1))
    if not supports("external_views"):  # Airflow 3.0: the extra link alone
        assert plugin.fastapi_apps == []
        return
    assert [(a["url_prefix"], a["name"]) for a in plugin.fastapi_apps] == [
        (URL_PREFIX, "Kinetic dashboard")
    ]
    views = {v["name"]: v for v in plugin.external_views}
    assert views["Kinetic"]["href"] == f"{URL_PREFIX}/" and views["Kinetic"]["destination"] == "nav"
    task = views["Kinetic job"]
    assert task["destination"] == "task_instance" and "{DAG_ID}" in task["href"]


@pytest.fixture(scope="module")
def airflow_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Airflow's api-server app with auth on: SimpleAuthManager, user alice/s3cret (built
    once: Airflow reads these settings when the app is created)."""
    passwords = tmp_path_factory.mktemp("auth") / "passwords.json"
    passwords.write_text(json.dumps({"alice": "s3cret"}))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "False")
        mp.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", "alice:admin")
        mp.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE", str(passwords))
        mp.setenv("AIRFLOW__API_AUTH__JWT_ISSUER", "kinetic-tests")  # 3.0 needs one
        from airflow.api_fastapi.app import create_app
        from starlette.testclient import TestClient

        yield TestClient(create_app())


def _token(client: Any) -> str:
    reply = client.post("/auth/token", json={"username": "alice", "password": "s3cret"})
    assert reply.status_code == 201, reply.text
    return str(reply.json()["access_token"])


def test_dashboard_answers_under_the_prefix_behind_airflow_auth(
    airflow_app: Any, storage: str
) -> None:
    job = kc.submit(jobfns.add, (2, 3), name="plugin-view")
    job.wait(timeout=60)
    page = f"{URL_PREFIX}/jobs/{job.job_id}"
    if not supports("external_views"):  # Airflow 3.0: not mounted where no UI shows it
        served = airflow_app.get(page, cookies={"_token": _token(airflow_app)})
        assert 'id="job-state"' not in served.text  # Airflow's own UI page (or a 404)
        return
    for path in (f"{URL_PREFIX}/", page, f"{URL_PREFIX}/api/jobs"):
        assert airflow_app.get(path).status_code == 401  # no token, no dashboard
    assert airflow_app.get(page, cookies={"_token": "not-a-jwt"}).status_code == 403
    token = _token(airflow_app)
    listing = airflow_app.get(f"{URL_PREFIX}/", headers={"Authorization": f"Bearer {token}"})
    assert listing.status_code == 200 and 'id="jobs-table"' in listing.text
    assert f'data-job-id="{job.job_id}"' in listing.text
    assert f'href="{page}"' in listing.text  # links follow the prefix Airflow mounts it at
    shown = airflow_app.get(page, cookies={"_token": token})  # the UI's cookie
    assert shown.status_code == 200 and job.job_id in shown.text
    refused = airflow_app.post(
        f"{page.replace('/jobs/', '/api/jobs/')}/cancel", cookies={"_token": token}
    )
    assert refused.status_code == 403  # read-only inside Airflow


def test_local_jobs_extra_link_opens_its_page(
    dagbag: Any, airflow_app: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``KINETIC_UI_URL``: the dashboard inside Airflow (3.1+), else a ``kinetic ui``."""
    from starlette.testclient import TestClient
    from test_dag_runs import run, xcom

    from kinetic_core.ui import create_app

    inside = supports("external_views")
    ui_url = f"http://127.0.0.1:8080{URL_PREFIX}" if inside else "http://127.0.0.1:8265"
    monkeypatch.setenv("KINETIC_UI_URL", ui_url)
    dr, tis = run(dagbag, "kt_value")
    ti = tis[("add", -1)]
    job_id = xcom(ti, "job_id")
    assert dr.state == "success" and job_id
    link = xcom(ti, XCOM_KEYS["job"])
    assert link == f"{ui_url}/jobs/{job_id}"
    path = link.removeprefix("http://127.0.0.1:8080" if inside else "http://127.0.0.1:8265")
    client = airflow_app if inside else TestClient(create_app())
    opened = client.get(path, cookies={"_token": _token(airflow_app)})
    assert opened.status_code == 200 and f"{job_id}" in opened.text
