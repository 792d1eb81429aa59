"""Kubernetes API failures surface as kinetic errors, mapped in one place (the client).

No cluster needed: a closed port stands for an unreachable API server, and a tiny HTTP
server for one that answers with errors. The retry policy is shortened so the tests
do not sit through its real backoff.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import urllib3
from tenacity import stop_after_attempt, wait_none

import kinetic_core as kc
from kinetic_core.backends import LaunchSpec
from kinetic_core.backends.kubernetes import KubeApiError, KubernetesBackend
from kinetic_core.backends.kubernetes import client as kube_client

ATTEMPTS = 3


class FakeApi(ThreadingHTTPServer):
    """Answers every request with ``status`` and counts the requests."""

    status = 503
    requests: list[str]


class _Handler(BaseHTTPRequestHandler):
    server: FakeApi

    def _answer(self) -> None:
        self.server.requests.append(f"{self.command} {self.path}")
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        body = json.dumps({"kind": "Status", "message": f"injected {self.server.status}"})
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    do_GET = do_POST = do_DELETE = do_PATCH = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(autouse=True)
def short_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    # Requests counted here are the call's own: no watch threads relisting beside it (the
    # watch's errors and reconnects: test_watch.py).
    monkeypatch.setenv("KINETIC_K8S_WATCH", "0")
    shortened = kube_client.API_RETRY.copy(stop=stop_after_attempt(ATTEMPTS), wait=wait_none())
    monkeypatch.setattr(kube_client, "API_RETRY", shortened)


def _backend(server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> KubernetesBackend:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "broken", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "broken",
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    target = kc.Target(backend="kubernetes", kube_context="broken", storage=f"file://{tmp_path}")
    return KubernetesBackend(target.resolve(environ={}))


@pytest.fixture
def fake_api() -> Iterator[FakeApi]:
    server = FakeApi(("127.0.0.1", 0), _Handler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _observers(backend: KubernetesBackend) -> dict[str, Callable[[], object]]:
    return {
        "poll": lambda: backend.poll(["job-a"]),
        "logs": lambda: backend.logs("job-a", tail=5),
        "read_logs": lambda: backend.read_logs("job-a", None),
        "cancel": lambda: backend.cancel("job-a"),
        "delete": lambda: backend.delete("job-a"),
    }


def test_unreachable_api_server_is_a_backend_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = _backend(f"http://127.0.0.1:{_closed_port()}", tmp_path, monkeypatch)
    for name, call in _observers(backend).items():
        with pytest.raises(kc.BackendError, match="gave up after retrying") as info:
            call()
        assert info.value.transient, name
        assert isinstance(info.value.__cause__, urllib3.exceptions.HTTPError), name
    # The create may have reached a server whose answer was lost: launching again is the
    # only safe next step, so the error stays transient (never a final SubmissionError).
    spec = LaunchSpec(job_id="job-a", storage_uri=f"file://{tmp_path}", target=kc.Target())
    with pytest.raises(kc.BackendError, match="create Job kinetic-job-a") as launched:
        backend.launch(spec)
    assert launched.value.transient and not isinstance(launched.value, kc.SubmissionError)


def test_server_errors_are_retried_then_a_backend_error_with_the_status(
    fake_api: FakeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = _backend(f"http://127.0.0.1:{fake_api.server_address[1]}", tmp_path, monkeypatch)
    for name, call in _observers(backend).items():
        fake_api.requests.clear()
        with pytest.raises(KubeApiError, match="HTTP 503: injected 503") as info:
            call()
        assert isinstance(info.value, kc.BackendError)
        assert (info.value.status, info.value.transient) == (503, True), name
        assert len(fake_api.requests) == ATTEMPTS, name  # retried, then given up


def test_permanent_errors_fail_at_once(
    fake_api: FakeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = _backend(f"http://127.0.0.1:{fake_api.server_address[1]}", tmp_path, monkeypatch)
    fake_api.status = 400
    with pytest.raises(kc.BackendError) as info:
        backend.poll(["job-a"])
    assert (info.value.status, info.value.transient, len(fake_api.requests)) == (400, False, 1)
    fake_api.status, fake_api.requests[:] = 401, []
    with pytest.raises(kc.ConfigError, match=r"rejected the credentials of context broken"):
        backend.poll(["job-a"])
    assert len(fake_api.requests) == 1
    fake_api.status = 422
    spec = LaunchSpec(job_id="job-a", storage_uri=f"file://{tmp_path}", target=kc.Target())
    with pytest.raises(kc.SubmissionError, match="Kubernetes rejected Job kinetic-job-a"):
        backend.launch(spec)
    fake_api.status = 404  # cancelling a job that is already gone is fine
    backend.cancel("job-a")
