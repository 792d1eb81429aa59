"""Job bodies for the signal and telemetry tests. Import-light: every job's runner imports it."""

from __future__ import annotations

import os
import signal
import time
from typing import Any


def wait_for_signal(path: str, name: str = "SIGUSR1", seconds: float = 60.0) -> int:
    """Install a handler for ``name`` that appends one line to ``path``; wait until it ran
    (then a little longer: a second delivery would land here); return how often it ran."""
    hits: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        hits.append(signum)
        with open(path, "a") as fh:
            fh.write(f"{signal.Signals(signum).name} {os.getpid()}\n")

    signal.signal(signal.Signals[name], handler)
    open(f"{path}.ready.{os.getpid()}", "w").close()  # one per process (worker)
    deadline = time.monotonic() + seconds
    while not hits and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.5)
    return len(hits)


def ready(path: str) -> int:
    """How many processes ``wait_for_signal(path)`` has installed its handler in."""
    folder, name = os.path.split(path)
    return sum(1 for n in os.listdir(folder) if n.startswith(f"{name}.ready."))


def wait_for_file(path: str, seconds: float = 60.0) -> str:
    """No handler installed: wait until ``path`` exists."""
    deadline = time.monotonic() + seconds
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    return "done"


def busy_holding(megabytes: int, stop: str, seconds: float = 60.0) -> int:
    """Hold ``megabytes`` of written (resident) memory and spin the CPU until ``stop`` exists."""
    block = b"\x01" * (megabytes << 20)
    deadline = time.monotonic() + seconds
    spins = 0
    while not os.path.exists(stop) and time.monotonic() < deadline:
        for _ in range(10_000):
            spins += 1
    return len(block) + spins * 0


def hold_with_child(path: str, trap_term: bool = False, seconds: float = 120.0) -> int:
    """Start a child that lives ``seconds``, record ``pid child-pid`` in ``path`` and wait
    for the child (a blocking wait the runner's SIGTERM must interrupt). On SIGTERM the
    preemption callback appends ``stopping``; ``trap_term`` ignores SIGTERM instead."""
    import subprocess
    import sys

    import kinetic_core as kc

    if trap_term:
        signal.signal(signal.SIGTERM, lambda signum, frame: None)
    else:

        @kc.on_preemption
        def stopping() -> None:
            with open(path, "a") as fh:
                fh.write("stopping\n")

    child = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])
    with open(path, "a") as fh:
        fh.write(f"{os.getpid()} {child.pid}\n")
    return child.wait()
