"""Preemption notice inside a job: SIGTERM means "you are being stopped, checkpoint now".

A spot VM's pod gets SIGTERM and its grace period (about 15 s on GKE) before SIGKILL. The
runner installs a handler that sets ``preempted()``, calls the functions registered with
``on_preemption`` (each once, in registration order) and then stops the function with
``SystemExit(143)``, so ``finally`` blocks run too. The runner then stores no result: the
job ends as the backend saw it (Preempted), and a recovery restarts it. Stdlib only.
"""

from __future__ import annotations

import signal
import sys
import traceback
from collections.abc import Callable
from typing import Any

EXIT_CODE = 143  # 128 + SIGTERM, what a process killed by SIGTERM reports
_callbacks: list[Callable[[], Any]] = []
_state = {"preempted": False}


def preempted() -> bool:
    """True once this job was told to stop (SIGTERM): write a checkpoint and return."""
    return _state["preempted"]


def on_preemption(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Call ``fn()`` when the job is told to stop, before it is interrupted. Usable as a
    decorator; keep ``fn`` short (the grace period is short)."""
    _callbacks.append(fn)
    return fn


def _handle(signum: int, frame: Any) -> None:
    if _state["preempted"]:
        return  # a second SIGTERM while checkpointing: let the callbacks finish
    _state["preempted"] = True
    print("kinetic: SIGTERM received: the job is being stopped", file=sys.stderr, flush=True)
    for fn in list(_callbacks):
        try:
            fn()
        except Exception:
            traceback.print_exc()
    raise SystemExit(EXIT_CODE)


def install() -> None:
    """Install the SIGTERM handler (main thread of the runner only)."""
    signal.signal(signal.SIGTERM, _handle)
