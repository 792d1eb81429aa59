"""An in-process ``gcp-storage-emulator`` with generation preconditions and fault injection.

The emulator ignores ``ifGenerationMatch``, so on its own it cannot test create-only
semantics. ``PreconditionStorage`` adds the check where objects are created (simple,
multipart and resumable uploads, and copies) and ``EmulatorServer`` serves requests one at
a time, so check-then-create is atomic just as on GCS. ``fail_next`` makes the next requests
fail with e.g. 503 (optionally after doing the work, as when a response is lost) to test
retries.
"""

from __future__ import annotations

import io
import json
import logging
import threading
from dataclasses import dataclass, field
from functools import partial
from http import server
from typing import Any
from urllib.parse import parse_qs, urlparse

from gcp_storage_emulator.handlers import buckets
from gcp_storage_emulator.server import RequestHandler, _read_raw_data
from gcp_storage_emulator.storage import Storage

for _name in ("gcp_storage_emulator", "api.object", "api.bucket"):
    logging.getLogger(_name).setLevel(logging.CRITICAL)

BUCKET = "kinetic-test"


class PreconditionFailed(Exception):
    """Raised inside the emulator's storage; the handler turns it into HTTP 412."""


class PreconditionStorage(Storage):
    """The emulator's in-memory storage, plus ``ifGenerationMatch`` / ``NotMatch`` checks.

    ``query`` is the current request's query string (the server is single-threaded). The
    resumable session URL repeats the initiating query, so its final PUT is checked too.
    """

    query: dict[str, list[str]]

    def __init__(self) -> None:
        super().__init__(use_memory_fs=True)
        self.query = {}

    def _check(self, bucket_name: str, file_name: str) -> None:
        try:
            current = str(self.get_file_obj(bucket_name, file_name)["generation"])
        except Exception:
            current = "0"  # absent: generation 0, as GCS defines it for preconditions
        match = self.query.get("ifGenerationMatch")
        if match and match[0] != current:
            raise PreconditionFailed(f"{file_name}: generation {current}, wanted {match[0]}")
        not_match = self.query.get("ifGenerationNotMatch")
        if not_match and not_match[0] == current:
            raise PreconditionFailed(f"{file_name}: generation is {current}")

    def create_file(
        self, bucket_name: str, file_name: str, content: bytes, file_obj: Any, file_id: Any = None
    ) -> Any:
        self._check(bucket_name, file_name)
        return super().create_file(bucket_name, file_name, content, file_obj, file_id)

    def create_resumable_upload(self, bucket_name: str, file_name: str, file_obj: Any) -> Any:
        self._check(bucket_name, file_name)
        return super().create_resumable_upload(bucket_name, file_name, file_obj)


@dataclass
class Faults:
    """Failures to inject into the next requests (thread-safe counters)."""

    remaining: int = 0
    skip: int = 0  # let this many requests through untouched first
    status: int = 503
    after_work: bool = False  # do the request, then answer with ``status`` (lost response)
    match: str | None = None  # only requests whose path contains this (None: any request)
    injected: int = 0
    requests: list[str] = field(default_factory=list)  # "METHOD path" of each injected fault
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, request: str) -> tuple[int, bool] | None:
        with self.lock:
            if self.match is not None and self.match not in request:
                return None
            if self.skip > 0 and self.remaining > 0:
                self.skip -= 1
                return None
            if self.remaining <= 0:
                return None
            self.remaining -= 1
            self.injected += 1
            return self.status, self.after_work


def _error_body(code: int, message: str, reason: str) -> bytes:
    errors = [{"domain": "global", "reason": reason, "message": message}]
    return json.dumps({"error": {"code": code, "message": message, "errors": errors}}).encode()


class Handler(RequestHandler):
    """The emulator's handler with precondition enforcement and fault injection."""

    def __init__(self, storage: PreconditionStorage, faults: Faults, *args: Any) -> None:
        self.faults = faults
        self.pstorage = storage
        super().__init__(storage, *args)

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _matchable(self) -> str:
        """Path and (for uploads) body: multipart uploads name the object in the body.

        The body is read here and handed back to the emulator's handler unchanged.
        """
        if self.faults.match is None or self.faults.match in self.path:
            return self.path
        length = int(self.headers.get("Content-Length") or 0)
        if not length:
            return self.path
        body = self.rfile.read(length)
        self.rfile = io.BytesIO(body)
        return f"{self.path} {body[:65536].decode('latin-1')}"

    def _route(self, method: str) -> None:
        fault = self.faults.take(self._matchable())
        if fault is not None:
            self.faults.requests.append(f"{method} {self.path}")
        if fault is not None and not fault[1]:
            _read_raw_data(self)  # drain the body so the client reads our answer, not a reset
            self._send(fault[0], _error_body(fault[0], "injected fault", "backendError"))
            return
        self.pstorage.query = parse_qs(urlparse(self.path).query)
        real_wfile: Any = getattr(self, "wfile")  # noqa: B009 (untyped base class)
        if fault is not None:
            self.wfile = io.BytesIO()  # do the work, throw the answer away
        try:
            super_handler = getattr(super(), f"do_{method}")
            super_handler()
        except PreconditionFailed as exc:
            self.wfile = real_wfile
            self._send(412, _error_body(412, f"Precondition failed: {exc}", "conditionNotMet"))
            return
        finally:
            self.pstorage.query = {}
        if fault is not None:
            self.wfile = real_wfile
            self._send(
                fault[0], _error_body(fault[0], "injected fault (after work)", "backendError")
            )

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PUT(self) -> None:
        self._route("PUT")

    def do_DELETE(self) -> None:
        self._route("DELETE")

    def do_PATCH(self) -> None:
        self._route("PATCH")


class _HTTPServer(server.HTTPServer):
    request_queue_size = 256  # many threads connect at once in the race tests
    allow_reuse_address = True


class EmulatorServer:
    """A GCS emulator on 127.0.0.1:<free port>, served from a background thread."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.storage = PreconditionStorage()
        self.faults = Faults()
        self._httpd = _HTTPServer((host, port), partial(Handler, self.storage, self.faults))
        self.port = self._httpd.server_address[1]
        self.endpoint = f"http://{host}:{self.port}"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="gcs-emulator", daemon=True
        )

    def start(self) -> EmulatorServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=10)

    def create_bucket(self, name: str) -> None:
        buckets.create_bucket(name, self.storage)

    def fail_next(
        self,
        n: int,
        status: int = 503,
        *,
        after_work: bool = False,
        skip: int = 0,
        match: str | None = None,
    ) -> None:
        """The next ``n`` requests (after ``skip`` good ones) answer ``status``.

        With ``after_work`` they take effect first: the response is what gets lost. With
        ``match`` only requests whose path or body contains it count (other traffic passes).
        """
        with self.faults.lock:
            self.faults.remaining = n
            self.faults.skip = skip
            self.faults.status = status
            self.faults.after_work = after_work
            self.faults.match = match
            self.faults.injected = 0
            self.faults.requests = []

    @property
    def injected(self) -> int:
        return self.faults.injected

    def object_names(self, bucket: str = BUCKET) -> list[str]:
        return sorted(self.storage.objects.get(bucket, {}))


@dataclass
class GCSEmulator:
    """What the ``gcs_emulator`` fixture yields."""

    server: EmulatorServer
    bucket: str = BUCKET

    def uri(self, prefix: str) -> str:
        return f"gs://{self.bucket}/{prefix}"

    @property
    def endpoint(self) -> str:
        return self.server.endpoint

    def fail_next(
        self,
        n: int,
        status: int = 503,
        *,
        after_work: bool = False,
        skip: int = 0,
        match: str | None = None,
    ) -> None:
        self.server.fail_next(n, status, after_work=after_work, skip=skip, match=match)

    @property
    def injected(self) -> int:
        return self.server.injected

    @property
    def injected_requests(self) -> list[str]:
        return list(self.server.faults.requests)
