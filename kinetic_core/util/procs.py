"""Is a process still alive? Safe against zombies and pid reuse (Linux /proc; else kill(0)).

Stdlib only: the local supervisor and the runner import it on every job start (file://
storage does, before a job's ``started.json``), so ``select`` is imported where used and
``signal`` not at all (its enums cost a fresh interpreter ~1 ms).
"""

from __future__ import annotations

import contextlib
import functools
import os

TYPE_CHECKING = False  # no `typing` at run time: a job's start path (runner.py)
if TYPE_CHECKING:
    from typing import Any

PR_SET_PDEATHSIG = 1
SIGKILL = 9  # signal.SIGKILL: 9 on every POSIX system
PR_SET_CHILD_SUBREAPER = 36


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks; -1 for a zombie; None where unknowable."""
    fields = _stat(pid)
    if fields is None:
        return None
    return int(fields[19]) if fields[0] != "Z" else -1


def _stat(pid: int | str) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state is [0], pgrp [2])."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].decode().split()
    except OSError:
        return None


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


def group_members(pgid: int, *, leader_ticks: int | None = None) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``, excluding the caller.

    Linux never reuses a pid while a process group holds it, so a process whose pid is
    ``pgid`` with a start time other than ``leader_ticks`` proves the group is empty.
    """
    if not os.path.isdir("/proc/self"):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass
        return [pgid]
    leader = _stat(pgid)
    if leader is not None and leader_ticks is not None and int(leader[19]) != leader_ticks:
        return []
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        fields = _stat(entry)
        if fields is not None and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


def signal_all(pids: list[int], sig: int) -> None:
    """Send ``sig`` to each of ``pids``; one that has ended already is skipped."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def kill_group_members(pgid: int) -> None:
    """SIGKILL every other process of group ``pgid`` (the caller, a member, survives)."""
    signal_all(group_members(pgid), SIGKILL)


def reap_descendants() -> None:
    """SIGKILL and reap every process left below the caller: as a subreaper
    (``adopt_orphans``) it adopts the orphans of its dead children. One read of
    /proc/self/.../children per generation; a group scan where that file is missing."""
    path = f"/proc/{os.getpid()}/task/{os.getpid()}/children"
    for _ in range(16):  # generations: killing a child orphans its children to us
        try:
            with open(path) as fh:
                kids = [int(p) for p in fh.read().split()]
        except OSError:
            kill_group_members(os.getpgrp())
            return
        if not kids:
            return
        for pid in kids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, SIGKILL)
        for pid in kids:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


def wait_exit(pid: int, timeout: float) -> None:
    """Block until ``pid`` exits or ``timeout`` passes (a pidfd; no polling)."""
    import select

    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return
    try:
        select.select([fd], [], [], timeout)
    finally:
        os.close(fd)


def stdout_of(pid: int) -> str | None:
    """The path the process's stdout points at (a local job's supervisor: its log)."""
    try:
        return os.readlink(f"/proc/{pid}/fd/1")
    except OSError:
        return None


@functools.cache
def libc() -> Any:
    """The C library through ctypes, loaded once (the local zygote loads it before forking)."""
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _prctl(option: int, value: int) -> None:
    try:
        libc().prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: best effort


def die_with_parent(parent: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux), then make sure
    the parent did not die before the request took effect."""
    _prctl(PR_SET_PDEATHSIG, SIGKILL)
    if os.getppid() != parent:
        os._exit(137)


def adopt_orphans() -> None:
    """Become the parent of this process's orphaned descendants (a child subreaper)."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
