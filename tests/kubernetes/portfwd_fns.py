"""Job bodies for the port-forward tests, shipped by value (pods do not import tests/)."""

from __future__ import annotations

import http.server
import os
import threading
import time


def serve_page(port: int, seconds: float) -> str:
    """Serve ``/`` (a page naming this job) on 127.0.0.1:``port`` for ``seconds``: what
    TensorBoard does in a training job. Pods of the test cluster share the host's network,
    so worker k of a slice serves on ``port + k``."""
    rank = int(os.environ.get("KINETIC_WORKER_INDEX") or 0)
    port += rank
    page = f"hello from job {os.environ.get('KINETIC_JOB_ID')}\n".encode()

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, format: str, *args: object) -> None:
            print("served", self.path, flush=True)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"serving on port {port}", flush=True)
    time.sleep(seconds)
    server.shutdown()
    return "done"
