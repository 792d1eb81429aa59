"""A terminated process cancels the jobs it is waiting on.

A scheduler stops a process with SIGTERM (a cancelled run, a worker shutdown, a pod
eviction). A detached job would outlive it and keep its accelerators busy for nobody, so
jobs and batches waited on inside ``cancel_on_termination(work)`` are kept in a
process-wide set and cancelled:

- from a SIGTERM handler, chained to whatever handler was there before (an orchestrator's
  own), then the signal's default action, and
- at interpreter exit (an orchestrator may end the process by exception, not by the
  signal's default action).

The wait often happens outside the main thread (Prefect runs async tasks on a loop
thread), where the orchestrator's exception never arrives; the handler does not care.
A hard kill (SIGKILL, OOM) runs nothing: the job keeps running, and the next attempt of
the task reattaches to it by its idempotency key.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

from kinetic_core.batch import BatchHandle
from kinetic_core.jobs.handle import JobHandle

__all__ = ["cancel_on_termination", "cancel_waiting", "install_termination_handler"]

_log = logging.getLogger("kinetic_core")
Work = JobHandle | BatchHandle

_waiting: dict[int, Work] = {}
_lock = threading.Lock()
_previous: Any = None
_installed = False


@contextlib.contextmanager
def cancel_on_termination(work: Work, *, enabled: bool = True) -> Iterator[None]:
    """While the body runs, a SIGTERM or the interpreter's exit cancels ``work``."""
    if not enabled:
        yield
        return
    install_termination_handler()
    with _lock:
        _waiting[id(work)] = work
    try:
        yield
    finally:
        with _lock:
            _waiting.pop(id(work), None)


def install_termination_handler() -> None:
    """Install the SIGTERM handler and the exit hook once. Signals can only be caught
    from the main thread: call this there (e.g. at import or decoration time) when the
    waits happen elsewhere; from another thread it does nothing."""
    global _installed, _previous
    with _lock:
        if _installed or threading.current_thread() is not threading.main_thread():
            return
        try:
            _previous = signal.signal(signal.SIGTERM, _on_sigterm)
        except ValueError:  # not the main interpreter's main thread
            return
        atexit.register(cancel_waiting, "the process is exiting")
        _installed = True


def cancel_waiting(why: str) -> None:
    """Cancel every job and batch waited on in this process."""
    with _lock:
        works = list(_waiting.values())
        _waiting.clear()
    for work in works:
        what = f"job {work.job_id}" if isinstance(work, JobHandle) else f"batch {work.group_id}"
        try:
            work.cancel()
        except Exception as exc:  # one failure must not keep the others running
            _log.error("Could not cancel Kinetic %s (%s): %s", what, why, exc)
        else:
            _log.warning("Cancelled Kinetic %s: %s.", what, why)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    cancel_waiting(f"the process received {signal.Signals(signum).name}")
    previous = _previous
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:  # SIG_DFL (or unknown): terminate as the signal would
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
