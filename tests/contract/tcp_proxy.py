"""A TCP pass-through proxy on 127.0.0.1 that injects network faults into API traffic.

TLS passes through unchanged (the client verifies the API server's own certificate, valid
for 127.0.0.1), so the proxy sees only TLS records: it can refuse traffic, or drop an
answer, but never read or forge one. Faults, armed by the test:

* ``reset_next(n)``: the next ``n`` client sends (a request, or a new connection's TLS
  hello) are not forwarded; their connection is reset instead (the server never sees them).
* ``reset_all(True)``: every client send is reset until ``reset_all(False)``.
* ``drop_next_answer(min_request_bytes)``: the next request of at least that size (a
  create, not a small GET) is forwarded to the server, and the server's answer is dropped
  and its connection reset: the request took effect, the client never learns it.

One thread per connection relays both directions with ``select`` (no thread ever blocks
on a socket another one closes).
"""

from __future__ import annotations

import select
import socket
import struct
import threading
from dataclasses import dataclass

TLS_APPLICATION_DATA = 0x17  # the record type of requests and answers (not of the handshake)
CHUNK = 1 << 16


@dataclass
class _Conn:
    client: socket.socket
    upstream: socket.socket
    drop_answer: bool = False

    def reset(self) -> None:
        """Abort both sides (RST: SO_LINGER 0), as a failing network path does."""
        for sock in (self.client, self.upstream):
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
            sock.close()

    def close(self) -> None:
        self.client.close()
        self.upstream.close()


class TcpProxy:
    """Listens on 127.0.0.1 (``port``) and relays to ``upstream`` (host, port)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.5)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._closed = False
        self._resets_left = 0
        self._reset_all = False
        self._drop_min: int | None = None
        self.resets = 0  # client sends reset so far
        self.answers_dropped = 0
        self.requests: list[int] = []  # sizes of application-data sends relayed (diagnostics)
        threading.Thread(target=self._accept_loop, name="tcp-proxy", daemon=True).start()

    # ---- faults -------------------------------------------------------------------------
    def reset_next(self, n: int) -> None:
        with self._lock:
            self._resets_left = n

    def reset_all(self, on: bool) -> None:
        with self._lock:
            self._reset_all = on

    def drop_next_answer(self, min_request_bytes: int) -> None:
        with self._lock:
            self._drop_min = min_request_bytes

    def clear(self) -> None:
        """No fault armed; counters back to zero."""
        with self._lock:
            self._resets_left, self._reset_all, self._drop_min = 0, False, None
            self.resets, self.answers_dropped = 0, 0
            self.requests.clear()

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    # ---- relay --------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.upstream, timeout=10)
        except OSError:
            client.close()
            return
        conn = _Conn(client, upstream)
        try:
            self._relay(conn)
        except OSError:
            conn.close()

    def _relay(self, conn: _Conn) -> None:
        while not self._closed:
            readable, _, _ = select.select([conn.client, conn.upstream], [], [], 0.5)
            for sock in readable:
                data = sock.recv(CHUNK)
                if not data:
                    conn.close()
                    return
                if sock is conn.client:
                    if not self._from_client(conn, data):
                        conn.reset()
                        return
                    conn.upstream.sendall(data)
                elif conn.drop_answer:
                    with self._lock:
                        self.answers_dropped += 1
                    conn.reset()
                    return
                else:
                    conn.client.sendall(data)
        conn.close()

    def _from_client(self, conn: _Conn, data: bytes) -> bool:
        """Account for a client send; False when it must be reset instead of relayed."""
        with self._lock:
            if self._reset_all or self._resets_left > 0:
                self._resets_left = max(0, self._resets_left - 1)
                self.resets += 1
                return False
            if data[0] == TLS_APPLICATION_DATA:
                self.requests.append(len(data))
                if self._drop_min is not None and len(data) >= self._drop_min:
                    self._drop_min = None
                    conn.drop_answer = True
            return True
