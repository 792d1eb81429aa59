"""The dashboard (``kinetic ui``) over a real storage root: every page and API route, the
token, read-only mode and the actions, on real local jobs in every state, a batch, a
recovered job and a multi-worker job. Starlette's TestClient drives the real app."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from starlette.testclient import TestClient

import kinetic_core as kc
from kinetic_core.cli.app import run as cli_main
from kinetic_core.control.polling import poll_ticks
from kinetic_core.jobs.handle import JobHandle
from kinetic_core.records import layout
from kinetic_core.storage import open_storage
from kinetic_core.ui import create_app, is_loopback, prepare, url_of, views
from kinetic_core.ui.auth import LoopbackHosts, cookie_name
from tests.cleanup import kill_leftovers
from tests.core import batch_helpers, jobfns
from tests.core.slice_runs import COUNT, lines_of, register, run_slice
from tests.ui import uifns

TOKEN = "s3cret-token-for-tests"
ACTION = {"X-Kinetic-Action": "1"}


@dataclass
class Store:
    uri: str
    gate: Path
    succeeded: kc.JobHandle
    failed: kc.JobHandle
    cancelled: kc.JobHandle
    running: kc.JobHandle
    pending: kc.JobHandle
    outputs: kc.JobHandle
    recovered: kc.JobHandle
    batch: kc.BatchHandle


def _never_launched(uri: str) -> JobHandle:
    """A job whose handle is stored but that no backend has yet: PENDING (Submitting)."""
    target = kc.Target(storage=uri).resolve()
    handle = JobHandle(
        job_id=f"pending-{os.urandom(4).hex()}",
        storage=uri,
        target=target.to_dict(),
        name="pending",
        created_at=time.time(),
    )
    open_storage(uri).write_bytes(layout.job_file(handle.job_id, layout.HANDLE), handle.record())
    return handle


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    root = tmp_path_factory.mktemp("ui")
    uri = f"file://{root / 'store'}"
    gate = root / "gate"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KINETIC_STORAGE", uri)
        mp.delenv("KINETIC_SIGNING_KEY", raising=False)
        mp.delenv("KINETIC_BACKEND", raising=False)
        mp.delenv("KINETIC_UI_URL", raising=False)
        work = root / "work"
        work.mkdir()
        recovered = kc.submit(
            jobfns.resumable,
            (str(work), 10, 75),
            target=kc.Target(max_recoveries=1, recover_on_exit_codes=[75]),
        )
        succeeded = kc.submit(jobfns.add, (40, 2), tags={"team": "ml"})
        failed = kc.submit(jobfns.fail, ("boom <b>not bold</b>",), tags={"team": "ml"})
        outputs = kc.submit(jobfns.write_output, ("model.txt", "weights"))
        cancelled = kc.submit(jobfns.sleep, (120,))
        ready = root / "ready"
        running = kc.submit(jobfns.wait_for_file, (str(gate), 1, str(ready), 300))
        batch = kc.submit_map(batch_helpers.square_or_fail, [1, 2, 7], name="squares")
        for job in (succeeded, failed, outputs):
            job.wait(timeout=60)
        recovered.wait(timeout=120)
        batch.wait(timeout=120)
        cancelled.cancel()
        for _ in range(6000):
            if ready.exists():
                break
            time.sleep(0.01)
        pending = _never_launched(uri)
        yield Store(
            uri, gate, succeeded, failed, cancelled, running, pending, outputs, recovered, batch
        )
        gate.touch()
        running.wait(timeout=60)
        kill_leftovers(root / "store")


@pytest.fixture
def client(store: Store) -> TestClient:
    return TestClient(create_app(store.uri))


def test_the_store_holds_every_state(store: Store) -> None:
    states = {
        name: getattr(store, name).state()
        for name in ("succeeded", "failed", "cancelled", "running", "pending", "recovered")
    }
    assert {k: s.status.value for k, s in states.items()} == {
        "succeeded": "SUCCEEDED",
        "failed": "FAILED",
        "cancelled": "CANCELLED",
        "running": "RUNNING",
        "pending": "PENDING",
        "recovered": "SUCCEEDED",
    }
    assert states["recovered"].recoveries == 1


def test_jobs_page_and_api_list_every_job_newest_first(store: Store, client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and 'id="jobs-table"' in page.text
    rows = re.findall(r'<tr data-job-id="([^"]+)" data-status="([A-Z_]+)"', page.text)
    shown = dict(rows)
    for name, status in (
        ("succeeded", "SUCCEEDED"),
        ("failed", "FAILED"),
        ("cancelled", "CANCELLED"),
        ("running", "RUNNING"),
        ("pending", "PENDING"),
    ):
        assert shown[getattr(store, name).job_id] == status, name
    assert 'src="/static/app.js"' in page.text and "http" not in page.text.split("<main>")[0]
    data = client.get("/api/jobs").json()
    created = [j["created_at"] for j in data["jobs"] if j["kind"] == "job"]
    assert created == sorted(created, reverse=True)
    html_ids = re.findall(r'<tr data-(?:job|batch)-id="([^"]+)"', page.text)
    assert [j.get("job_id") or j["batch_id"] for j in data["jobs"]] == html_ids


def _batch_members(store: Store) -> tuple[set[str], set[str]]:
    """(children, driver jobs) of the store's batch, from the unfiltered listing."""
    listed = kc.list_jobs(target=kc.Target(storage=store.uri))
    members = {h.job_id for h in listed if kc.batch_of(h) == store.batch.group_id}
    children = {j.job_id for j in store.batch.jobs if j is not None}
    return children, members - children


def test_a_batch_is_one_row_of_the_jobs_page_unless_all(store: Store, client: TestClient) -> None:
    group = store.batch.group_id
    children, drivers = _batch_members(store)
    assert len(children) == 3 and len(drivers) == 1  # the batch's detached driver job
    rows = client.get("/api/jobs").json()["jobs"]
    (batch,) = [r for r in rows if r["kind"] == "batch"]
    assert batch["batch_id"] == group and batch["name"] == "squares"
    assert batch["counts"] == {"SUCCEEDED": 2, "FAILED": 1} and batch["done"] == batch["total"]
    jobs = {r["job_id"] for r in rows if r["kind"] == "job"}
    assert len(jobs) == len(rows) - 1 and not jobs & (children | drivers)
    assert store.succeeded.job_id in jobs

    every = client.get("/api/jobs?all=1").json()["jobs"]
    assert {r["kind"] for r in every} == {"job"}
    assert children | drivers | jobs <= {r["job_id"] for r in every}

    page = client.get("/").text
    (row,) = re.findall(rf'<tr data-batch-id="{group}".*?</tr>', page)
    assert f'href="/batches/{group}"' in row and "3/3 done" in row
    assert not any(f'data-job-id="{j}"' in page for j in children | drivers)
    assert 'name="all" value="1">' in page  # the toggle, unchecked
    everything = client.get("/?all=1").text
    assert "data-batch-id" not in everything and 'name="all" value="1" checked>' in everything
    assert all(f'data-job-id="{j}"' in everything for j in children | drivers)


def test_paging_shows_a_batch_once_on_the_page_of_its_newest_job(
    store: Store, client: TestClient
) -> None:
    def keys(rows: list[dict[str, str]]) -> list[str]:
        return [r.get("job_id") or r["batch_id"] for r in rows]

    whole = keys(client.get("/api/jobs").json()["jobs"])
    paged, query = [], "limit=1"
    while query:
        listing = client.get(f"/api/jobs?{query}").json()
        paged += keys(listing["jobs"])
        query = listing["next_until"] and f"limit=1&until={listing['next_until']}"
    assert paged == whole and store.batch.group_id in paged


def test_a_status_filter_shows_a_batch_where_one_of_its_jobs_matches(
    store: Store, client: TestClient
) -> None:
    def batch_rows(query: str) -> list[str]:
        rows = client.get(f"/api/jobs?{query}").json()["jobs"]
        return [r["batch_id"] for r in rows if r["kind"] == "batch"]

    assert batch_rows("status=FAILED") == [store.batch.group_id]  # child 2 failed
    assert batch_rows("status=RUNNING") == []  # every child and the driver have ended


def test_jobs_filters_status_tag_name_since_and_limit(store: Store, client: TestClient) -> None:
    def ids(query: str) -> list[str]:
        response = client.get(f"/api/jobs?{query}")
        assert response.status_code == 200, response.text
        return [j.get("job_id") or j["batch_id"] for j in response.json()["jobs"]]

    assert ids("status=failed") == ids("status=FAILED")  # any case
    assert store.failed.job_id in ids("status=FAILED")
    assert store.succeeded.job_id not in ids("status=FAILED")
    assert set(ids("tag=team=ml")) == {store.succeeded.job_id, store.failed.job_id}
    assert ids("name=add") == [store.succeeded.job_id]
    assert ids("since=1h") and ids(f"since={time.time() + 3600:.0f}") == []
    first = ids("limit=2")
    listing = client.get("/api/jobs?limit=2").json()
    assert len(first) == 2 and listing["next_until"]
    second = ids(f"limit=2&until={listing['next_until']}")
    assert second and not set(first) & set(second)
    page = client.get("/?status=FAILED&tag=team%3Dml")
    assert page.status_code == 200
    assert re.findall(r'<tr data-job-id="([^"]+)"', page.text) == [store.failed.job_id]
    assert 'value="team=ml"' in page.text  # the form keeps the filters


def test_bad_filters_are_400_with_what_is_accepted(client: TestClient) -> None:
    for query, words in (
        ("status=DONE", "not a job status"),
        ("since=yesterday-ish", "is not a time"),
        ("tag=nokey", "KEY=VALUE"),
        ("limit=0", "limit must be"),
        ("limit=abc", "limit must be"),
    ):
        response = client.get(f"/api/jobs?{query}")
        assert response.status_code == 400 and words in response.json()["error"], query
    assert client.get("/?status=DONE").status_code == 400


def test_a_succeeded_job_page_shows_state_timeline_result_and_is_not_collected(
    store: Store, client: TestClient
) -> None:
    job_id = store.succeeded.job_id
    page = client.get(f"/jobs/{job_id}")
    assert page.status_code == 200
    for element in ('id="job-state"', '<svg id="timeline"', '<pre id="logs"', 'id="usage-chart"'):
        assert element in page.text
    assert 'data-status="SUCCEEDED"' in page.text and '<pre class="result">42</pre>' in page.text
    assert 'id="worker-select"' not in page.text  # one worker: nothing to choose
    assert 'id="cancel-job"' not in page.text  # read-only
    data = client.get(f"/api/jobs/{job_id}").json()
    assert data["state"]["status"] == "SUCCEEDED"
    assert data["outcome"] == {
        "kind": "result",
        "available": True,
        "text": "42",
        "type": "builtins.int",
        "note": "",
    }
    assert [t["status"] for t in data["history"]][-1] == "SUCCEEDED"
    assert data["target"]["backend"] == "local" and "signing_key" not in data["target"]
    # Viewing changed nothing: the result was not marked collected, it is still readable.
    assert not store.succeeded.state().collected
    assert store.succeeded.result(timeout=10, cleanup=False) == 42


def test_a_failed_job_shows_its_remote_traceback_escaped(store: Store, client: TestClient) -> None:
    job_id = store.failed.job_id
    data = client.get(f"/api/jobs/{job_id}").json()
    assert data["outcome"]["kind"] == "error" and data["outcome"]["type"] == "ValueError"
    assert "Traceback" in data["outcome"]["text"] and "boom" in data["outcome"]["text"]
    page = client.get(f"/jobs/{job_id}").text
    assert "<b>not bold</b>" not in page  # every value is escaped
    assert "&lt;b&gt;not bold&lt;/b&gt;" in page and 'class="traceback"' in page


def test_a_cancelled_and_a_pending_job(store: Store, client: TestClient) -> None:
    cancelled = client.get(f"/api/jobs/{store.cancelled.job_id}").json()
    assert cancelled["state"]["status"] == "CANCELLED" and cancelled["outcome"]["kind"] == (
        "cancelled"
    )
    pending = client.get(f"/api/jobs/{store.pending.job_id}").json()
    assert (pending["state"]["status"], pending["state"]["reason"]) == ("PENDING", "Submitting")
    assert pending["outcome"] is None
    assert client.get(f"/jobs/{store.pending.job_id}").status_code == 200


def test_a_recovered_job_shows_both_attempts(store: Store, client: TestClient) -> None:
    data = client.get(f"/api/jobs/{store.recovered.job_id}").json()
    assert data["state"]["recoveries"] == 1 and data["state"]["attempt"] == 2
    assert {t["attempt"] for t in data["history"]} == {1, 2}
    assert data["recovery_note"].startswith("recovered 1x")
    assert data["outcome"]["kind"] == "result" and "'resumed_from': 5" in data["outcome"]["text"]
    page = client.get(f"/jobs/{store.recovered.job_id}").text
    assert "recovered 1x" in page


def test_a_recovered_job_is_one_row_and_one_page_with_every_attempts_log(
    store: Store, client: TestClient
) -> None:
    """Issue 33, item 4: the id Airflow and Prefect link to (attempt 1's) is the job's one
    row and page; its page lists both attempts and reads the log of the one picked (the
    newest by default), also when opened by attempt 2's id."""
    first, second = store.recovered.job_id, store.recovered.state().job_id
    assert first != second
    rows = [r.get("job_id") for r in client.get("/api/jobs").json()["jobs"]]
    assert rows.count(first) == 1 and second not in rows
    assert f'data-job-id="{second}"' not in client.get("/").text
    for opened in (first, second):
        data = client.get(f"/api/jobs/{opened}").json()
        assert data["job_id"] == first and data["state"]["status"] == "SUCCEEDED"
        assert [(a["attempt"], a["job_id"]) for a in data["attempts"]] == [(1, first), (2, second)]
        path = f"/api/jobs/{opened}/logs/part"
        latest = client.get(path).json()
        assert (latest["attempt"], latest["latest"], latest["done"]) == (2, 2, True)
        assert "starts at step 5" in latest["text"] and "step 0" not in latest["text"]
        one = client.get(path, params={"attempt": 1}).json()
        assert one["attempt"] == 1 and one["done"] is True
        assert "starts at step 0" in one["text"] and "step 5" not in one["text"]
    page = client.get(f"/jobs/{first}").text
    assert '<select id="attempt-select">' in page and page.count('data-attempt-option="') == 2
    assert client.get(f"/api/jobs/{first}/logs/part", params={"attempt": 3}).status_code == 400
    old_api = client.get(f"/api/jobs/{first}/logs", params={"attempt": 2}).json()
    assert "starts at step 5" in old_api["text"] and old_api["attempt"] == 2


def test_a_long_log_opens_on_its_tail_in_parts_searched_and_downloaded(storage_uri: str) -> None:
    """Issue 33, item 5: the page gets one bounded part at a time (the last first), earlier
    ones on demand; the whole log is a download, and a search finds lines in any part."""
    job = kc.submit(uifns.numbered_lines, (40_000,), target=kc.Target(storage=storage_uri))
    job.wait(timeout=120)
    whole = job.logs()
    assert len(whole) > 1_900_000
    client = TestClient(create_app(storage_uri))
    path = f"/api/jobs/{job.job_id}/logs"
    tail = client.get(f"{path}/part").json()
    parts = tail["parts"]
    assert parts >= 8 and tail["part"] == parts - 1 and tail["complete"] and tail["done"]
    assert len(tail["text"]) <= 256 * 1024 and whole.endswith(tail["text"])
    assert "line 039999" in tail["text"] and "line 000000" not in tail["text"]
    texts = [client.get(f"{path}/part", params={"part": k}).json()["text"] for k in range(parts)]
    assert "".join(texts) == whole and texts[0].startswith("line 000000")
    again = client.get(f"{path}/part", params={"part": parts - 1, "offset": 100}).json()
    assert again["text"] == tail["text"][100:]
    down = client.get(f"{path}/download")
    assert down.status_code == 200 and down.text == whole
    assert down.headers["content-disposition"].startswith("attachment;")
    found = client.get(f"{path}/search", params={"q": "LINE 031337"}).json()
    (hit,) = found["hits"]
    assert (
        hit["text"].startswith("line 031337")
        and texts[hit["part"]].split("\n")[hit["line"]] == (hit["text"])
    )
    for bad in ({"part": str(parts)}, {"part": "x"}, {"worker": "1"}):
        assert client.get(f"{path}/part", params=bad).status_code == 400, bad
    assert client.get(f"{path}/search", params={"q": ""}).status_code == 400


def test_logs_follow_with_a_cursor(store: Store, client: TestClient) -> None:
    path = f"/api/jobs/{store.recovered.job_id}/logs"
    first = client.get(path).json()
    assert "starts at step" in first["text"] and first["done"] is True
    rest = client.get(path, params={"cursor": first["cursor"]}).json()
    assert rest["text"] == "" or "starts at step 0" not in rest["text"]
    running = client.get(f"/api/jobs/{store.running.job_id}/logs").json()
    assert running["done"] is False and running["status"] == "RUNNING"
    for cursor in ("not-a-cursor", "{broken", "x" * 9000):
        response = client.get(path, params={"cursor": cursor})
        assert response.status_code == 400, cursor
    assert client.get(path, params={"worker": "1"}).status_code == 400  # one worker only
    assert client.get(path, params={"worker": "-1"}).status_code == 400


def test_outputs_are_listed_and_streamed(store: Store, client: TestClient) -> None:
    job_id = store.outputs.job_id
    data = client.get(f"/api/jobs/{job_id}").json()
    assert data["outputs"] == [{"path": "model.txt"}]
    page = client.get(f"/jobs/{job_id}").text
    assert f'href="/api/jobs/{job_id}/outputs/model.txt"' in page
    response = client.get(f"/api/jobs/{job_id}/outputs/model.txt")
    assert response.status_code == 200 and response.content == b"weights"
    assert "attachment" in response.headers["content-disposition"]


def test_path_traversal_on_outputs_is_refused(store: Store, client: TestClient) -> None:
    job_id = store.outputs.job_id
    root = Path(store.uri.removeprefix("file://"))
    outside = root / "jobs" / job_id / "handle.json"
    link = root / "outputs" / job_id / "escape.txt"
    link.symlink_to(outside)  # a link out of the job's folder
    try:
        for path in (
            "../../jobs/" + job_id + "/handle.json",
            "..%2F..%2Fjobs%2F" + job_id + "%2Fhandle.json",
            "%2Fetc%2Fpasswd",
            "escape.txt",
            "nothing-here.txt",
        ):
            response = client.get(f"/api/jobs/{job_id}/outputs/{path}")
            assert response.status_code in (404, 400), (path, response.status_code)
            assert b'"job_id"' not in response.content and b"root:" not in response.content
    finally:
        link.unlink()


def test_unknown_job_is_404_and_bad_id_is_400(client: TestClient) -> None:
    for path in ("/jobs/{}", "/api/jobs/{}", "/api/jobs/{}/logs", "/api/jobs/{}/outputs/a"):
        assert client.get(path.format("nosuch-job-1")).status_code == 404, path
        assert client.get(path.format("BAD_ID")).status_code == 400, path
    assert client.get("/batches/nosuch-batch-1").status_code == 404
    assert client.get("/api/batches/BAD_ID").status_code == 400
    missing = client.get("/api/jobs/nosuch-job-1").json()
    assert "No job 'nosuch-job-1'" in missing["error"]


def test_batches_pages_show_progress_children_and_failed_errors(
    store: Store, client: TestClient
) -> None:
    listing = client.get("/api/batches").json()["batches"]
    (batch,) = [b for b in listing if b["group_id"] == store.batch.group_id]
    assert batch["counts"] == {"SUCCEEDED": 2, "FAILED": 1} and batch["done"] == 3
    assert client.get("/batches").status_code == 200
    page = client.get(f"/batches/{store.batch.group_id}")
    assert page.status_code == 200 and 'id="batch-progress"' in page.text
    assert page.text.count('class="seg s-') == 2
    data = client.get(f"/api/batches/{store.batch.group_id}").json()
    assert [c["status"] for c in data["children"]] == ["SUCCEEDED", "SUCCEEDED", "FAILED"]
    (failed,) = data["failed"]
    assert failed["index"] == 2 and "input 7 is bad" in failed["error"]
    assert "input 7 is bad" in page.text


def test_usage_page_and_api(store: Store, client: TestClient) -> None:
    page = client.get("/usage")
    assert page.status_code == 200 and '<svg id="usage-chart"' in page.text
    data = client.get("/api/usage?since=1d&tag=team%3Dml").json()
    assert data["jobs"] == 2
    if hasattr(kc.JobHandle, "usage"):  # recorded once the usage records are merged
        assert data["available"] and data["tags"][0]["tag"] == "team=ml"
    else:
        assert data["available"] is False and data["days"] == []
    assert client.get("/api/usage?since=never").status_code == 400


def test_usage_covers_the_asked_period_or_says_what_it_covers(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33, item 8: not a silent cut at the newest page of jobs; CPU-only jobs (no
    chips) show their running hours."""
    target = kc.Target(storage=storage_uri)
    jobs = [kc.submit(jobfns.sleep, (0.2, n), target=target) for n in range(5)]
    for job in jobs:
        job.wait(timeout=60)
    monkeypatch.setattr(views, "MAX_LIMIT", 2)  # a page of the listing: 2 jobs
    monkeypatch.setattr(views, "USAGE_PAGE", 2, raising=False)
    client = TestClient(create_app(storage_uri))
    data = client.get("/api/usage?since=1d").json()
    assert data["jobs"] == 5 and data["covered"]["complete"] is True
    assert data["total"]["chip_hours"] == 0 and data["total"]["running_hours"] >= 1.0 / 3600
    page = client.get("/usage?since=1d").text
    assert "All 5 jobs created since" in page and "running hours" in page
    monkeypatch.setattr(views, "USAGE_JOBS", 3)
    data = client.get("/api/usage?since=1d").json()
    assert data["jobs"] == 3 and data["covered"]["complete"] is False
    newest = sorted(jobs, key=lambda j: j.created_at)[-3]
    assert data["covered"]["oldest"] == datetime.fromtimestamp(newest.created_at, UTC).isoformat()
    assert "The newest 3 jobs created since" in client.get("/usage?since=1d").text


def test_static_assets_are_served_from_the_package(client: TestClient) -> None:
    js = client.get("/static/app.js")
    assert js.status_code == 200 and 'api("/api/jobs"' in js.text
    assert "http://" not in js.text.replace("http://www.w3.org/2000/svg", "")
    assert client.get("/static/app.css").status_code == 200
    assert client.get("/static/../views.py").status_code == 404


def test_every_link_is_under_the_mount_prefix(store: Store) -> None:
    client = TestClient(create_app(store.uri, root_path="/kinetic"))
    page = client.get(f"/jobs/{store.outputs.job_id}").text
    links = re.findall(r'(?:href|src)="([^"]+)"', page)
    assert links and all(link.startswith("/kinetic/") for link in links), links
    assert 'data-base="/kinetic"' in page
    with pytest.raises(kc.ConfigError, match="root_path"):
        create_app(store.uri, root_path="kinetic")


# ---- the token ------------------------------------------------------------------------------
def test_with_a_token_every_request_without_it_is_401(store: Store) -> None:
    client = TestClient(create_app(store.uri, token=TOKEN))
    for path in ("/", f"/jobs/{store.succeeded.job_id}", "/api/jobs", "/static/app.js"):
        assert client.get(path).status_code == 401, path
    assert client.get("/api/jobs", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/?token=wrong").status_code == 401
    assert client.post(f"/api/jobs/{store.running.job_id}/cancel").status_code == 401
    assert store.running.state().status is kc.JobStatus.RUNNING
    bearer = client.get("/api/jobs", headers={"Authorization": f"Bearer {TOKEN}"})
    assert bearer.status_code == 200 and bearer.json()["jobs"]


def test_the_token_in_the_url_sets_a_strict_http_only_cookie(store: Store) -> None:
    client = TestClient(create_app(store.uri, token=TOKEN))
    first = client.get(f"/?token={TOKEN}&status=FAILED", follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"] == "/?status=FAILED"
    cookie = first.headers["set-cookie"]
    assert cookie.startswith(f"{cookie_name(TOKEN)}=") and TOKEN not in cookie
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    assert client.get("/api/jobs").status_code == 200  # the cookie carries on
    assert client.get("/").status_code == 200


def test_serve_needs_a_token_off_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")
    assert prepare("127.0.0.1", None) is None
    generated = prepare("0.0.0.0", None)
    assert generated and len(generated) >= 24 and generated != prepare("0.0.0.0", None)
    assert prepare("0.0.0.0", TOKEN) == TOKEN
    assert url_of("0.0.0.0", 8265, "abc") == "http://0.0.0.0:8265/?token=abc"
    with pytest.raises(kc.ConfigError, match="token"):
        create_app(token="short")


def test_a_loopback_dashboard_refuses_other_host_names(store: Store) -> None:
    client = TestClient(LoopbackHosts(create_app(store.uri)), base_url="http://127.0.0.1:8265")
    assert client.get("/api/jobs").status_code == 200
    rebound = client.get("/api/jobs", headers={"Host": "evil.example.com"})
    assert rebound.status_code == 421


# ---- actions --------------------------------------------------------------------------------
def test_read_only_refuses_actions_with_403(store: Store, client: TestClient) -> None:
    for path in (
        f"/api/jobs/{store.running.job_id}/cancel",
        f"/api/batches/{store.batch.group_id}/cancel",
    ):
        response = client.post(path, headers=ACTION)
        assert response.status_code == 403 and "read-only" in response.json()["error"]
    assert client.get(f"/api/jobs/{store.running.job_id}/cancel").status_code == 405
    assert store.running.state().status is kc.JobStatus.RUNNING


def test_actions_cancel_a_job_and_a_batch(storage_uri: str, tmp_path: Path) -> None:
    job = kc.submit(jobfns.sleep, (120,))
    batch = kc.submit_map(jobfns.sleep, [120, 120], name="sleepers")
    client = TestClient(create_app(storage_uri, token=TOKEN, allow_actions=True))
    auth = {"Authorization": f"Bearer {TOKEN}"}
    page = client.get(f"/jobs/{job.job_id}", headers=auth).text
    assert 'id="cancel-job"' in page
    # A cross-site form cannot send the action header; a foreign Origin is refused too.
    assert client.post(f"/api/jobs/{job.job_id}/cancel", headers=auth).status_code == 403
    foreign = {**auth, **ACTION, "Origin": "http://evil.example.com"}
    assert client.post(f"/api/jobs/{job.job_id}/cancel", headers=foreign).status_code == 403
    assert not job.state().terminal
    done = client.post(f"/api/jobs/{job.job_id}/cancel", headers={**auth, **ACTION})
    assert done.status_code == 200 and done.json()["cancelled"] is True
    assert job.state().status is kc.JobStatus.CANCELLED
    response = client.post(f"/api/batches/{batch.group_id}/cancel", headers={**auth, **ACTION})
    assert response.status_code == 200 and response.json()["cancel_requested"] is True
    statuses = batch.wait(timeout=60)
    assert all(s in (kc.ChildStatus.CANCELLED, kc.ChildStatus.UNSUBMITTED) for s in statuses)
    assert client.post("/api/jobs/nosuch-job-1/cancel", headers={**auth, **ACTION}).status_code == (
        404
    )


# ---- a multi-worker job -----------------------------------------------------------------------
def test_a_multi_worker_job_offers_each_workers_log(
    storage_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    register(monkeypatch)
    job = run_slice(storage_uri, tmp_path)
    client = TestClient(create_app(storage_uri))
    page = client.get(f"/jobs/{job.job_id}").text
    assert '<select id="worker-select">' in page
    workers = page.split('<select id="worker-select">')[1].split("</select>")[0]
    assert workers.count('<option value="') == COUNT + 1  # all workers, then each
    two = client.get(f"/api/jobs/{job.job_id}/logs", params={"worker": 2}).json()
    assert two["text"].splitlines() == lines_of(2) and two["workers"] == COUNT
    merged = client.get(f"/api/jobs/{job.job_id}/logs").json()
    assert "[w3] " in merged["text"]
    again = client.get(f"/api/jobs/{job.job_id}/logs", params={"cursor": merged["cursor"]})
    assert again.status_code == 200 and "[w0] " not in again.json()["text"]
    assert client.get(f"/api/jobs/{job.job_id}/logs", params={"worker": COUNT}).status_code == 400


# ---- the command ------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, token: str | None = None) -> int:
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_kinetic_ui_off_loopback_prints_a_generated_token_and_requires_it(
    storage_uri: str,
) -> None:
    kc.submit(jobfns.add, (1, 2)).wait(timeout=60)
    port = _free_port()
    command = [sys.executable, "-m", "kinetic_core.cli", "--storage", storage_uri, "ui"]
    proc = subprocess.Popen(
        [*command, "--host", "0.0.0.0", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.fullmatch(rf"kinetic dashboard: http://0\.0\.0\.0:{port}/\?token=(\S+)\n", line)
        assert match, line
        token = match.group(1)
        url = f"http://127.0.0.1:{port}/api/jobs"
        for _ in poll_ticks(interval=0.1, timeout=60, describe=lambda: "kinetic ui to listen"):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert proc.poll() is None, proc.stdout.read()
        assert _get(url) == 401
        assert _get(url, "not-the-token") == 401
        assert _get(url, token) == 200
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)


def test_kinetic_ui_refuses_a_short_token(storage_uri: str) -> None:
    kc.submit(jobfns.add, (1, 2)).wait(timeout=60)
    code = cli_main(["--storage", storage_uri, "ui", "--token", "short"])
    assert code == 2
