"""The runner's one daemon thread: delivers signals and samples telemetry.

One thread, one tick: every ``signals.POLL_SECONDS`` it lists the job's signal requests
(one storage list) and, when ``telemetry.SAMPLE_SECONDS`` have passed, writes a telemetry
sample. It starts right before the function runs (the call's env is applied by then, so
``KINETIC_SIGNAL_POLL_SECONDS`` / ``KINETIC_TELEMETRY_SECONDS`` in ``Target(env=...)``
count) and stops right after it returns, before the result is stored: no handler of the
function runs while its outcome is being written. A failing tick (storage unreachable)
is logged and the job goes on: neither signals nor telemetry may break a job.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable

from kinetic_core import signals, telemetry
from kinetic_core.storage import Storage

#: How long ``stop()`` waits for a tick in progress (a slow storage write).
STOP_SECONDS = 5.0
_current: list[Sidecar] = []


class Sidecar(threading.Thread):
    def __init__(self, storage: Storage, job_id: str, worker: int, signing_key: str | None) -> None:
        super().__init__(name="kinetic-sidecar", daemon=True)
        self.watcher = signals.Watcher(storage, job_id, worker, signing_key)
        self.sampler = telemetry.Sampler(storage, job_id, worker, signing_key)
        self.tick = float(os.environ.get(signals.POLL_ENV) or signals.POLL_SECONDS)
        self.halt = threading.Event()
        self.failures = 0

    def run(self) -> None:
        next_sample, first = 0.0, True
        while True:
            if not first:  # one tick in: the function has had time to install its handlers
                self._guarded(self.watcher.tick)
            first = False
            if time.monotonic() >= next_sample:
                self._guarded(self.sampler.write)
                next_sample = time.monotonic() + self.sampler.interval
            wait = min(self.tick, max(0.0, next_sample - time.monotonic()))
            if self.halt.wait(wait):
                return

    def _guarded(self, step: Callable[[], None]) -> None:
        try:
            step()
        except Exception as exc:  # storage down, a full disk: the job goes on
            self.failures += 1
            if self.failures in (1, 10) or self.failures % 100 == 0:
                print(
                    f"kinetic: signals/telemetry tick failed ({self.failures}x): "
                    f"{type(exc).__name__}: {exc}",
                    file=sys.stderr,
                    flush=True,
                )


def start(storage: Storage, job_id: str, worker: int, signing_key: str | None) -> None:
    """Start the sidecar of this runner (once)."""
    if _current:
        return
    sidecar = Sidecar(storage, job_id, worker, signing_key)
    _current.append(sidecar)
    sidecar.start()


def stop() -> None:
    """Stop it (idempotent) and write a last telemetry sample, so even a job shorter than
    one interval leaves one and ``top()`` of an ended job shows how it ended."""
    if not _current:
        return
    sidecar = _current.pop()
    sidecar.halt.set()
    sidecar.join(STOP_SECONDS)
    if not sidecar.is_alive():
        with contextlib.suppress(Exception):
            sidecar.sampler.write()
