"""Is a process still alive? Safe against zombies and pid reuse (Linux /proc; else kill(0))."""

from __future__ import annotations

import os


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks; -1 for a zombie; None where unknowable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return int(fields[19]) if fields[0] != b"Z" else -1


def process_alive(pid: int, ticks: int | None = None) -> bool:
    """True while ``pid`` runs and (when ``ticks`` is known) is the same process as recorded."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    now = start_ticks(pid)
    if now == -1:  # a zombie is dead, only not yet reaped by its parent
        return False
    return now is None or ticks is None or ticks == now
