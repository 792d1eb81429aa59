"""Port forwarding without a cluster: port specs, the relay (real sockets on 127.0.0.1), and
the local backend's answer (its jobs' ports are already local), through the API and the CLI.
The Kubernetes path: tests/kubernetes/test_port_forward.py."""

from __future__ import annotations

import asyncio
import socket
import socketserver
import threading
from collections.abc import Iterator

import pytest

import kinetic_core as kc
from kinetic_core.cli import main
from kinetic_core.control.polling import poll_ticks
from kinetic_core.util.ports import ForwardEnded, PortSpec, Relay
from tests.core import jobfns


class Upper(socketserver.BaseRequestHandler):
    """Reads until the client's EOF, then answers the bytes upper-cased: an answer that
    only comes after a half-close."""

    def handle(self) -> None:
        data = b""
        while chunk := self.request.recv(4096):
            data += chunk
        self.request.sendall(data.upper())


@pytest.fixture
def upper() -> Iterator[int]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Upper)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def ask(port: int, text: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(text)
        conn.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := conn.recv(4096):
            answer += chunk
        return answer


def direct(remote: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", remote), timeout=10)


def test_port_specs_as_kubectl_takes_them() -> None:
    assert kc.parse_ports(["16006:6006", 8080, ":9000"]) == [
        PortSpec(16006, 6006),
        PortSpec(8080, 8080),
        PortSpec(0, 9000),
    ]
    for bad in ("80:http", "0", "70000", "1:2:3", "-1:80", ""):
        with pytest.raises(kc.ConfigError, match=r"port spec .*LOCAL:REMOTE"):
            kc.parse_ports([bad])
    with pytest.raises(kc.ConfigError, match="given twice"):
        kc.parse_ports(["8080:80", "8080:81"])
    with pytest.raises(kc.ConfigError, match="no port given"):
        kc.parse_ports([])


def test_relay_carries_connection_after_connection_and_waits_for_the_answer(upper: int) -> None:
    with Relay([PortSpec(0, upper)], direct) as relay:
        local = relay.local_port(upper)
        assert local != upper
        assert ask(local, b"first") == b"FIRST"  # the client's EOF did not cut the answer
        assert ask(local, b"second") == b"SECOND"
    with pytest.raises(OSError):
        direct(local).close()  # closed: nothing listens


def test_local_port_in_use_is_refused_and_nothing_is_left_listening(upper: int) -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        taken = busy.getsockname()[1]
        with pytest.raises(
            kc.ConfigError, match=rf"cannot listen on 127\.0\.0\.1:{taken}.*another"
        ):
            Relay([PortSpec(0, upper), PortSpec(taken, upper + 1)], direct)


def test_a_connect_that_ends_the_forward_stops_it(upper: int) -> None:
    said: list[str] = []

    def gone(remote: int) -> socket.socket:
        raise ForwardEnded(f"pod of port {remote} is gone")

    with Relay([PortSpec(0, upper)], gone, on_error=said.append) as relay:
        with socket.create_connection(("127.0.0.1", relay.local_port(upper))) as conn:
            assert conn.recv(10) == b""  # dropped
        assert relay.wait(timeout=30)
        assert relay.ended == f"pod of port {upper} is gone" and said == [relay.ended]


def test_a_local_jobs_port_is_already_local(
    storage_uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    job = kc.submit(jobfns.sleep, (60,))
    for _ in poll_ticks(interval=0.1, timeout=60, describe=lambda: "the job to run"):
        if job.status() is kc.JobStatus.RUNNING:
            break
    try:
        with job.port_forward("16006:6006") as forward:
            assert forward.already_local and forward.local_port(6006) == 6006
            assert "already local, at localhost:6006" in forward.note
        assert asyncio.run(job.aport_forward(":9000")).local_port(9000) == 9000  # the twin
        assert main(["jobs", "port-forward", job.job_id, "6006", "8080"]) == 0
        out = capsys.readouterr().out
        assert "already local, at localhost:6006, localhost:8080" in out
        assert main(["jobs", "port-forward", job.job_id, "80:http"]) == 2
        assert "port spec '80:http'" in capsys.readouterr().err
    finally:
        job.cancel()
    with pytest.raises(kc.JobNotRunning, match=r"CANCELLED.*nothing to forward"):
        job.port_forward(6006)
    assert main(["jobs", "port-forward", job.job_id, "6006"]) == 2
    assert "nothing to forward" in capsys.readouterr().err
