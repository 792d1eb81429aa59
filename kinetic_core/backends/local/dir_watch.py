"""Wake a waiter on this machine the moment a job's folder in file:// storage changes.

A job reads terminal once its runner writes ``outcome.json``; its supervisor exits (the
pidfd wake of ``LocalBackend.sleep_until_change``) only after syncing outputs and writing
the exit record, milliseconds later. An inotify watch on the job's folder wakes the waiter
when the outcome (or ``started.json``) lands instead. Linux only, through ctypes (loaded
once per process); where inotify is unavailable nothing is watched and the waiter sleeps
as before. A change that lands before the watch is added is caught by the next poll: a
missed wake costs one backoff tick, never a missed state.

Inotify descriptors are kept for the process's life and reused (one per concurrent
sleeper): closing one waits for the kernel's SRCU grace period, ~10 ms, which would cost
more than the wake saves.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

from kinetic_core import procs

IN_MOVED_TO = 0x00000080  # os.replace() into the folder
IN_CREATE = 0x00000100  # os.link() into the folder (create-only records)
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000

_idle: list[int] = []  # drained descriptors with no watches, ready for the next sleeper
_lock = threading.Lock()


@contextlib.contextmanager
def watching(folders: list[str]) -> Iterator[int | None]:
    """An inotify descriptor that turns readable once a file is created or moved into one
    of ``folders`` while the block runs; None if none of them could be watched."""
    fd = _take() if folders else None
    if fd is None:
        yield None
        return
    libc = procs.libc()
    mask = IN_CREATE | IN_MOVED_TO
    watches = [libc.inotify_add_watch(fd, os.fsencode(folder), mask) for folder in folders]
    try:
        yield fd if any(wd >= 0 for wd in watches) else None
    finally:
        for wd in watches:
            if wd >= 0:
                libc.inotify_rm_watch(fd, wd)
        _drain(fd)
        with _lock:
            _idle.append(fd)


def _take() -> int | None:
    with _lock:
        if _idle:
            return _idle.pop()
    try:
        fd = int(procs.libc().inotify_init1(IN_NONBLOCK | IN_CLOEXEC))
    except (OSError, AttributeError):  # no ctypes or no inotify (not Linux)
        return None
    return fd if fd >= 0 else None


def _drain(fd: int) -> None:
    """Read what is queued (the events and each removed watch's IN_IGNORED)."""
    with contextlib.suppress(OSError):  # BlockingIOError: nothing left
        while os.read(fd, 65536):
            pass
