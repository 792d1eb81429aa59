"""The process is being terminated: cancel the jobs its kinetic tasks are waiting on.

A worker stops a flow-run process with SIGTERM (cancel, shutdown, pod eviction). Prefect's
flow engine turns that signal into ``TerminationSignal`` in the *main* thread, marks the
run crashed or cancelled, then restores the previous handler and sends the signal again.
A kinetic task usually waits in another thread (a sync flow runs async tasks on a loop
thread), so the exception never reaches it and nothing would cancel its job. This module
keeps the jobs being waited on in a process-wide set and cancels them:

- from a SIGTERM handler installed beneath Prefect's (chained to whatever handler was
  there before, then the signal's default action), and
- at interpreter exit (a runner-driven cancel ends the process by exception, not by the
  signal's default action).

A hard kill (SIGKILL, OOM) runs nothing here: the job keeps running and the next attempt
of the task run reattaches to it.
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

import kinetic_core as kc

_log = logging.getLogger("kinetic_prefect")
Work = kc.JobHandle | kc.BatchHandle

_waiting: dict[int, Work] = {}
_lock = threading.Lock()
_previous: Any = None
_installed = False


@contextlib.contextmanager
def cancelled_on_termination(work: Work, *, enabled: bool = True) -> Iterator[None]:
    """While the body runs, a SIGTERM or the interpreter's exit cancels ``work``."""
    if not enabled:
        yield
        return
    install()
    with _lock:
        _waiting[id(work)] = work
    try:
        yield
    finally:
        with _lock:
            _waiting.pop(id(work), None)


def install() -> None:
    """Install the SIGTERM handler and the exit hook once (signals: main thread only)."""
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
    """Cancel every job and batch a kinetic task in this process is waiting on."""
    with _lock:
        works = list(_waiting.values())
        _waiting.clear()
    for work in works:
        what = f"job {work.job_id}" if isinstance(work, kc.JobHandle) else f"batch {work.group_id}"
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
