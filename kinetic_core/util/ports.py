"""Port forwarding to a running job: the port specs (``LOCAL:REMOTE``, ``PORT``) and the
forward itself, a local TCP listener per port whose connections a backend carries to the
job (``JobHandle.port_forward``, ``kinetic jobs port-forward``).

Why here and not in a backend: parsing a spec and relaying bytes are the same for every
backend; a backend only says how one connection reaches the job's port (``connect``).
Each accepted connection gets its own upstream (a Kubernetes port-forward stream carries
one connection). The local side's end of input is passed on only to an upstream that can
half-close (has ``shutdown``): a Kubernetes port-forward websocket (v4) cannot, and
closing it would cut off the answer; the connection ends when the job's side ends it.
"""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from kinetic_core.errors import ConfigError, KineticError

log = logging.getLogger(__name__)

LOCALHOST = "127.0.0.1"
CHUNK = 64 * 1024

#: Opens one upstream connection to the job's port ``remote``: a connected socket-like object.
Connect = Callable[[int], Any]


class ForwardEnded(KineticError):
    """A connect that says the forward cannot go on (the pod is gone, a permission is missing):
    the forward stops, and ``PortForward.ended`` carries this message."""


@dataclass(frozen=True)
class PortSpec:
    """One forwarded port: ``local`` on 127.0.0.1 (0: any free port) to ``remote`` in the job."""

    local: int
    remote: int

    def __str__(self) -> str:
        return f"{self.local}:{self.remote}"


def _port(text: str, spec: str, *, zero: bool) -> int:
    low = 0 if zero else 1
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not low <= value <= 65535 or not text.strip().isdigit():
        raise ConfigError(
            f"port spec {spec!r}: {text!r} is not a port number ({low}-65535). Write LOCAL:REMOTE "
            "(e.g. 16006:6006), PORT for the same number on both sides, or :REMOTE for any free "
            "local port."
        )
    return value


def parse_ports(specs: Iterable[str | int]) -> list[PortSpec]:
    """``LOCAL:REMOTE``, ``PORT`` (same on both sides) or ``:REMOTE`` (any free local port),
    as kubectl port-forward takes them; a ConfigError naming the bad one."""
    out: list[PortSpec] = []
    for raw in specs:
        spec = str(raw).strip()
        local, sep, remote = spec.partition(":")
        if not sep:
            local = remote = spec
        out.append(PortSpec(_port(local or "0", spec, zero=True), _port(remote, spec, zero=False)))
    if not out:
        raise ConfigError("no port given: name at least one, e.g. 6006 or 16006:6006.")
    taken = [p.local for p in out if p.local]
    if len(set(taken)) != len(taken):
        raise ConfigError(f"ports {' '.join(map(str, out))}: a local port is given twice.")
    return out


class PortForward:
    """An open forward, a context manager (closed on exit). ``ports`` hold the bound local
    ports; ``note`` is what a person should read (e.g. the port is already local);
    ``ended`` says why the forward stopped by itself (None while it runs or when closed)."""

    def __init__(self, ports: list[PortSpec], *, note: str = "", already_local: bool = False):
        self.ports = ports
        self.note = note
        self.already_local = already_local
        self.ended: str | None = None
        self._closed = threading.Event()

    def local_port(self, remote: int) -> int:
        """The local port that reaches the job's port ``remote``."""
        for spec in self.ports:
            if spec.remote == remote:
                return spec.local
        raise ConfigError(f"port {remote} is not forwarded here (forwarded: {self.ports}).")

    def url(self, remote: int, scheme: str = "http") -> str:
        return f"{scheme}://{LOCALHOST}:{self.local_port(remote)}"

    def close(self) -> None:
        self._closed.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the forward is closed or ends by itself; True once it has."""
        return self._closed.wait(timeout)

    def __enter__(self) -> PortForward:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def already_local(ports: list[PortSpec], where: str) -> PortForward:
    """What a backend whose jobs run on this machine answers: nothing to open, the job's
    ports are on localhost already."""
    same = [PortSpec(p.remote, p.remote) for p in ports]
    at = ", ".join(f"localhost:{p.remote}" for p in ports)
    return PortForward(
        same,
        note=f"the job runs on this machine ({where}): its port is already local, at {at}; "
        "nothing to forward.",
        already_local=True,
    )


class Relay(PortForward):
    """Listens on 127.0.0.1 for each port and relays each accepted connection to ``connect``.

    Listeners are bound before anything runs, so a port in use is a ConfigError with nothing
    left open. Threads: one accept loop per port, one relay per connection; ``close`` wakes
    them all through one socket pair (nobody reads it, so it stays readable for every
    selector)."""

    def __init__(
        self, ports: list[PortSpec], connect: Connect, on_error: Callable[[str], None] = log.warning
    ) -> None:
        listeners = _listen(ports)
        super().__init__(
            [replace(p, local=s.getsockname()[1]) for p, s in zip(ports, listeners, strict=True)]
        )
        self._connect = connect
        self._on_error = on_error
        self._wake_r, self._wake_w = socket.socketpair()
        self._threads = [
            threading.Thread(
                target=self._accept_loop,
                args=(s, p.remote),
                daemon=True,
                name=f"port-forward {p}",
            )
            for p, s in zip(self.ports, listeners, strict=True)
        ]
        self._listeners = listeners
        for thread in self._threads:
            thread.start()

    def close(self) -> None:
        """Stop listening and end every relayed connection (also after the forward ended
        by itself: its listeners are closed here)."""
        self._closed.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        for thread in self._threads:
            thread.join(timeout=5)
        for listener in self._listeners:
            listener.close()

    def _stop(self, why: str) -> None:
        """The forward cannot go on: say why and close (from a relay thread)."""
        self.ended = why
        self._on_error(why)
        self._closed.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _accept_loop(self, listener: socket.socket, remote: int) -> None:
        with selectors.DefaultSelector() as sel:
            sel.register(listener, selectors.EVENT_READ)
            sel.register(self._wake_r, selectors.EVENT_READ)
            while not self._closed.is_set():
                ready = {key.fileobj for key, _ in sel.select()}
                if self._wake_r in ready or self._closed.is_set():
                    return
                with contextlib.suppress(OSError):
                    conn, _ = listener.accept()
                    threading.Thread(
                        target=self._serve, args=(conn, remote), daemon=True, name="relay"
                    ).start()

    def _serve(self, conn: socket.socket, remote: int) -> None:
        with conn:
            try:
                upstream = self._connect(remote)
            except ForwardEnded as exc:
                return self._stop(str(exc))
            except KineticError as exc:
                return self._on_error(str(exc))
            with contextlib.closing(upstream):
                self._pump(conn, upstream)

    def _pump(self, conn: socket.socket, upstream: Any) -> None:
        """Bytes both ways until the job's side ends, or the forward is closed."""
        with selectors.DefaultSelector() as sel:
            sel.register(conn, selectors.EVENT_READ, upstream)
            sel.register(upstream, selectors.EVENT_READ, conn)
            sel.register(self._wake_r, selectors.EVENT_READ)
            while True:
                for key, _ in sel.select():
                    if key.fileobj is self._wake_r:
                        return
                    try:
                        data = key.fileobj.recv(CHUNK)  # type: ignore[union-attr]
                        if data:
                            key.data.sendall(data)
                            continue
                    except OSError:
                        return
                    if key.fileobj is not conn:
                        return  # the job's side ended: so does the connection
                    sel.unregister(conn)  # the client's EOF: keep reading the answer
                    if half_close := getattr(upstream, "shutdown", None):
                        with contextlib.suppress(OSError):
                            half_close(socket.SHUT_WR)


def _listen(ports: list[PortSpec]) -> list[socket.socket]:
    """A listening socket per port on 127.0.0.1; a port in use closes the others and raises."""
    bound: list[socket.socket] = []
    for spec in ports:
        try:
            bound.append(socket.create_server((LOCALHOST, spec.local)))
        except OSError as exc:
            for sock in bound:
                sock.close()
            raise ConfigError(
                f"cannot listen on {LOCALHOST}:{spec.local} for port {spec.remote}: "
                f"{exc.strerror or exc}. Choose another local port (e.g. "
                f"{spec.local + 10000 if spec.local < 55535 else 0}:{spec.remote}, or "
                f":{spec.remote} for any free one)."
            ) from None
    return bound
