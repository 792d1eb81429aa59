"""The runner's one daemon thread: delivers signals and samples telemetry.

One thread, one tick: every ``signals.POLL_SECONDS`` it lists the job's signal requests
(one storage list) and, when ``telemetry.SAMPLE_SECONDS`` have passed, writes a telemetry
sample. It starts right before the function runs (the call's env is applied by then, so
``KINETIC_SIGNAL_POLL_SECONDS`` / ``KINETIC_TELEMETRY_SECONDS`` in ``Target(env=...)``
count) and is halted right after it returns, before the result is stored (``halt()``): no
handler of the function runs while its outcome is being written. Its last sample comes
after the outcome (``stop()``), so that a job shorter than one interval still leaves one.
A failing tick (storage unreachable) is logged and the job goes on: neither signals nor
telemetry may break a job.

Importing this module imports neither: the thread imports ``signals`` and ``telemetry``
(with the records and hashing they need) at its first wake, ``FIRST_WAKE_SECONDS`` in,
so a fresh runner's function starts without them (``bench/runner_start.py``) and a short
job leaves them to ``stop()``, after its outcome.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import sys
import time

TYPE_CHECKING = False  # no `typing` at run time: a job's start path (runner.py)
if TYPE_CHECKING:
    from collections.abc import Callable

    from kinetic_core.runtime import signals, telemetry
    from kinetic_core.storage import Storage

#: How long ``stop()`` waits for a tick in progress (a slow storage write).
STOP_SECONDS = 5.0
#: When the thread first wakes and imports its machinery. Nothing was due before: the
#: watcher's first tick comes one tick in, the first sample at min(tick, interval), 2 s by
#: default; shorter settings (tests) begin here.
FIRST_WAKE_SECONDS = 1.0
_current: list[Sidecar] = []


class Sidecar:
    """The thread's state; ``start`` runs ``run`` on a new thread without waiting for it to
    be scheduled (``threading.Thread.start`` waits: on a loaded machine, milliseconds on
    every job's critical path)."""

    watcher: signals.Watcher
    sampler: telemetry.Sampler
    tick: float

    def __init__(self, storage: Storage, job_id: str, worker: int, signing_key: str | None) -> None:
        import threading  # here, not above: the runner imports this module before its start

        self.context = (storage, job_id, worker, signing_key)
        self.armed = False
        self.began = time.monotonic()
        self.halt = threading.Event()
        self.busy = threading.Lock()  # held for a tick, and by stop() for the last sample
        self.failures = 0

    def arm(self) -> None:
        """Import and build the watcher and the sampler (once; under ``busy``)."""
        if self.armed:
            return
        from kinetic_core.runtime import signals, telemetry

        self.watcher = signals.Watcher(*self.context)
        self.sampler = telemetry.Sampler(*self.context)
        self.tick = float(os.environ.get(signals.POLL_ENV) or signals.POLL_SECONDS)
        self.armed = True

    def start(self) -> None:
        _thread.start_new_thread(self.run, ())  # a daemon thread: never joined (see stop())

    def run(self) -> None:
        if self.halt.wait(FIRST_WAKE_SECONDS):
            return
        with self.busy:
            if self.halt.is_set():
                return
            self._guarded(self.arm)
            if not self.armed:
                return
        # The first sample one tick in too: a short job's only sample is stop()'s, and the
        # thread costs a short job nothing beyond its start (a sample at once competed with
        # the function and was waited for by stop(): ~2 storage writes per no-op job).
        next_sample = self.began + min(self.tick, self.sampler.interval)
        if self.halt.wait(max(0.0, next_sample - time.monotonic())):
            return
        while True:  # one tick in: the function has had time to install handlers
            with self.busy:  # stop() takes it: no tick starts once it has
                if self.halt.is_set():
                    return
                self._guarded(self.watcher.tick)
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


def halt() -> None:
    """No tick runs once this returns (the runner then writes the outcome, which no
    signal handler may interrupt); ``stop()`` still writes the last sample, after the
    outcome: a short job's imports of the sampler are not on its way to the outcome.
    Waits only for a tick in progress."""
    if not _current:
        return
    sidecar = _current[0]
    sidecar.halt.set()
    if sidecar.busy.acquire(timeout=STOP_SECONDS):  # halt is set: no tick starts after this
        sidecar.busy.release()


def stop() -> None:
    """Stop it (idempotent) and write a last telemetry sample, so even a job shorter than
    one interval leaves one and ``top()`` of an ended job shows how it ended. Waits only
    for a tick in progress (not for the thread to wake and end: that is off the job's
    critical path); once this returns no tick runs again."""
    if not _current:
        return
    sidecar = _current.pop()
    sidecar.halt.set()
    if sidecar.busy.acquire(timeout=STOP_SECONDS):  # halt is set: no tick starts after this
        try:
            with contextlib.suppress(Exception):
                sidecar.arm()  # a job shorter than the first wake: imported here
                sidecar.sampler.write()
            if sidecar.armed:  # else the import failed: it never ticked, nothing to say
                sidecar.watcher.close()  # a runner stopping on a decided end says so
        finally:
            sidecar.busy.release()
