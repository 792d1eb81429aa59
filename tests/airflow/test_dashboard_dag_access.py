"""Inside Airflow, a user sees the kinetic jobs of the DAGs Airflow lets them read (issue
33): the mounted dashboard asks the auth manager ``is_authorized_dag`` for each job's
``airflow-dag-id`` tag; a job with no DAG (submitted outside Airflow) is shown only to a
user who may read every DAG. Real api-server app, real auth manager (SimpleAuthManager
with one DAG denied to ``bob``), real jobs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from denying_auth import DENIED_DAG, DENIED_USER
from kinetic_airflow.plugins import URL_PREFIX, supports

import kinetic_core as kc
from tests.core import jobfns

pytestmark = pytest.mark.skipif(
    not supports("external_views"), reason="the dashboard is mounted on Airflow 3.1+"
)

DAG_TAG = "airflow-dag-id"


@dataclass
class Jobs:
    open: kc.JobHandle
    secret: kc.JobHandle
    outside: kc.JobHandle


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    passwords = tmp_path_factory.mktemp("auth") / "passwords.json"
    passwords.write_text(json.dumps({"alice": "s3cret", DENIED_USER: "s3cret"}))
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(__import__("pathlib").Path(__file__).parent))
        mp.setenv("AIRFLOW__CORE__AUTH_MANAGER", "denying_auth.DenyingAuthManager")
        mp.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS", "False")
        mp.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS", f"alice:admin,{DENIED_USER}:viewer")
        mp.setenv("AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE", str(passwords))
        mp.setenv("AIRFLOW__API_AUTH__JWT_ISSUER", "kinetic-tests")
        from airflow.api_fastapi.app import create_app
        from starlette.testclient import TestClient

        yield TestClient(create_app())


@pytest.fixture(scope="module")
def jobs(app: Any) -> Jobs:
    found = Jobs(
        open=kc.submit(jobfns.add, (1, 2), name="open", tags={DAG_TAG: "open-dag"}),
        secret=kc.submit(
            jobfns.fail, ("secret <b>x</b>",), name="secret", tags={DAG_TAG: DENIED_DAG}
        ),
        outside=kc.submit(jobfns.add, (3, 4), name="outside"),
    )
    for job in (found.open, found.secret, found.outside):
        job.wait(timeout=60)
    return found


def _as(app: Any, user: str) -> dict[str, str]:
    reply = app.post("/auth/token", json={"username": user, "password": "s3cret"})
    assert reply.status_code == 201, reply.text
    return {"Authorization": f"Bearer {reply.json()['access_token']}"}


def _listed(app: Any, headers: dict[str, str], query: str = "") -> set[str]:
    reply = app.get(f"{URL_PREFIX}/api/jobs?all=1&limit=1000{query}", headers=headers)
    assert reply.status_code == 200, reply.text
    return {row.get("job_id") for row in reply.json()["jobs"]}


def test_a_user_lists_only_jobs_of_dags_they_may_read(app: Any, jobs: Jobs) -> None:
    bob = _as(app, DENIED_USER)
    listed = _listed(app, bob)
    assert jobs.open.job_id in listed
    assert jobs.secret.job_id not in listed
    assert jobs.outside.job_id not in listed  # no DAG: only for who may read every DAG
    assert _listed(app, bob, f"&tag={DAG_TAG}={DENIED_DAG}") == set()
    page = app.get(f"{URL_PREFIX}/", headers=bob).text
    assert jobs.secret.job_id not in page and jobs.outside.job_id not in page


def test_a_denied_jobs_page_api_logs_and_outputs_are_404(app: Any, jobs: Jobs) -> None:
    bob = _as(app, DENIED_USER)
    for job in (jobs.secret, jobs.outside):
        for path in (
            f"/jobs/{job.job_id}",
            f"/api/jobs/{job.job_id}",
            f"/api/jobs/{job.job_id}/logs",
            f"/api/jobs/{job.job_id}/outputs/x.txt",
        ):
            reply = app.get(f"{URL_PREFIX}{path}", headers=bob)
            assert reply.status_code == 404, (path, reply.status_code)
            assert "FAILED" not in reply.text and "ValueError" not in reply.text, path
    assert app.get(f"{URL_PREFIX}/api/jobs/{jobs.open.job_id}", headers=bob).status_code == 200


def test_usage_counts_only_readable_jobs(app: Any, jobs: Jobs) -> None:
    bob = _as(app, DENIED_USER)
    shown = app.get(f"{URL_PREFIX}/api/usage?since=1d&tag={DAG_TAG}%3D{DENIED_DAG}", headers=bob)
    assert shown.status_code == 200 and shown.json()["jobs"] == 0


def test_a_user_who_may_read_every_dag_sees_every_job(app: Any, jobs: Jobs) -> None:
    alice = _as(app, "alice")
    listed = _listed(app, alice)
    assert {jobs.open.job_id, jobs.secret.job_id, jobs.outside.job_id} <= listed
    secret = app.get(f"{URL_PREFIX}/api/jobs/{jobs.secret.job_id}", headers=alice)
    assert secret.status_code == 200 and secret.json()["state"]["status"] == "FAILED"
