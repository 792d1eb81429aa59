"""The standalone dashboard's token and host checks (issue 33): a ``?token=`` never stays
in the address bar, each server names its own cookie (and never sends the token itself
in it), a loopback server answers its own printed URL, no redirect leaves the site.
Starlette's TestClient drives the real app over an empty store."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from kinetic_core.ui import create_app, url_of
from kinetic_core.ui.auth import LoopbackHosts, cookie_name

TOKEN = "s3cret-token-for-tests"
OTHER = "another-token-of-another-server"


@pytest.fixture
def client(storage_uri: str) -> TestClient:
    return TestClient(create_app(storage_uri, token=TOKEN))


def test_a_token_in_the_url_is_redirected_away_even_with_the_cookie(client: TestClient) -> None:
    assert client.get(f"/?token={TOKEN}").status_code == 200  # sets the cookie
    again = client.get(f"/?token={TOKEN}&status=FAILED", follow_redirects=False)
    assert again.status_code == 303 and again.headers["location"] == "/?status=FAILED"
    stale = client.get("/?token=not-the-token", follow_redirects=False)  # an old link
    assert stale.status_code == 303 and "token" not in stale.headers["location"]
    bearer = TestClient(client.app)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with_bearer = bearer.get(f"/api/jobs?token={TOKEN}", headers=headers, follow_redirects=False)
    assert with_bearer.status_code == 303 and with_bearer.headers["location"] == "/api/jobs"


def test_each_server_names_its_own_cookie_and_it_holds_no_token(storage_uri: str) -> None:
    one = TestClient(create_app(storage_uri, token=TOKEN))
    other = TestClient(create_app(storage_uri, token=OTHER))
    first = one.get(f"/?token={TOKEN}", follow_redirects=False)
    cookie = first.headers["set-cookie"]
    assert cookie_name(TOKEN) != cookie_name(OTHER)
    assert cookie.startswith(f"{cookie_name(TOKEN)}=") and TOKEN not in cookie
    # One browser, two dashboards on one host (cookies ignore ports): both stay signed in.
    other.get(f"/?token={OTHER}")
    other.cookies.update(one.cookies)
    assert other.get("/api/jobs").status_code == 200
    one.cookies.update(other.cookies)
    assert one.get("/api/jobs").status_code == 200


def test_no_redirect_leaves_the_site(client: TestClient) -> None:
    for path in (f"//evil.example/?token={TOKEN}", f"/\\evil.example/?token={TOKEN}"):
        reply = client.get(path, follow_redirects=False)
        assert reply.status_code == 303, path
        location = reply.headers["location"]
        assert location.startswith("/") and not location.startswith(("//", "/\\")), location


@pytest.mark.parametrize("host", ["127.0.0.2", "127.0.0.1", "localhost", "::1"])
def test_a_loopback_server_answers_its_own_printed_url(storage_uri: str, host: str) -> None:
    url = url_of(host, 8265, None)
    served = TestClient(LoopbackHosts(create_app(storage_uri)), base_url=url.rstrip("/"))
    assert served.get("/api/jobs").status_code == 200, url
    rebound = served.get("/api/jobs", headers={"Host": "evil.example.com:8265"})
    assert rebound.status_code == 421
