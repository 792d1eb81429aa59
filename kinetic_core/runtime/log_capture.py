"""The runner's output tee'd into storage as it runs, at the file-descriptor level.

File descriptors 1 and 2 of the runner become one pipe, so the function's prints, its
subprocesses and C extensions writing to fd 1/2 all pass through it. A small pump process,
forked from the runner (no interpreter to start: it answers a flush within
milliseconds, where a fresh ``python`` kept the job's end waiting ~35 ms), reads the pipe, copies every byte to the
original stdout first (the pod's log: ``kubectl logs`` and the pod log API keep every
byte) and feeds a ``ChunkWriter`` (``log_chunks.py``), whose chunks an uploader thread
writes every ``FLUSH_SECONDS`` and as soon as one fills. At every end the rest reaches
storage: the runner asks for a flush before the job's end is decided (``sync``; skipped
when nothing was ever printed: the pipe is empty and the pump never read) and, at
its exit (normal return, exception, SIGTERM, ``atexit``), gives fds 1 and 2 back and
waits for the pump, which drains the pipe to its end, writes the last chunk and marks the
stream ended. SIGKILL of the whole container (a SIGTERM grace period run out, the node
gone) loses at most the last ``FLUSH_SECONDS`` of storage's copy; the pod log has them.

Why a process, not a pump thread in the runner (``bench/logs.py`` measures both): a
thread dies with the runner, and what it had not yet copied out of the pipe dies with it:
a function ending in ``os._exit`` right after a print, a C extension's segfault, an
OOM-killed runner lost its last lines even from the pod log. The pump process outlives
the runner (it ignores SIGTERM and ends at the pipe's end), and it has its own GIL: a job
printing 10 MB/s shares none of its interpreter with the copying. It costs one fork per
job, made before the function runs (single-threaded then); the child opens its own
storage client (pooled connections are the runner's) and never returns into the runner's
code. Where the runner is the container's PID 1 and dies abruptly, the
kernel ends the pump too: then, as with a thread, storage lacks the unflushed rest.

Only where stdout is not a regular file: a backend that already writes the job's output
to a file keeps it (the local backend copies ``output.log`` into storage), and its process
checks read the job's stdout. ``KINETIC_LOG_TO_STORAGE=1``/``0`` forces it.
``KINETIC_LOG_FLUSH_SECONDS`` sets the flush interval.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import mmap
import os
import select
import signal
import stat
import sys
import threading
import time

from kinetic_core.records.log_chunks import ChunkWriter
from kinetic_core.storage import open_fresh

TYPE_CHECKING = False  # no `typing` at run time: a job's start path (runner.py)
if TYPE_CHECKING:
    from typing import Any

    from kinetic_core.storage import Storage

FLUSH_SECONDS = 3.0
#: How long the runner waits for a flush it asked for, and for the pump at its exit.
SYNC_SECONDS = 10.0
END_SECONDS = 10.0
READ_BYTES = 1 << 16
#: After a short read the pump waits this long before the next, so a job printing line by
#: line is forwarded in blocks (on 2 cores, per-write wakeups slowed a 10 MB/s job ~15%).
GATHER_SECONDS = 0.005
PIPE_BYTES = 1 << 20
_F_SETPIPE_SZ = 1031  # Linux fcntl


class LogCapture:
    """The runner's side: fds 1 and 2 into a pipe read by the pump process."""

    def __init__(self, storage: Storage, job_id: str, *, worker: int = 0) -> None:
        self.storage = storage
        self.job_id = job_id
        self.worker = worker
        self._saved: tuple[int, int] | None = None
        self._ctl = -1  # runner -> pump: flush requests
        self._ack = -1  # pump -> runner: done
        self._data = -1  # the pipe's write end (also fds 1 and 2 while captured)
        self._read = mmap.mmap(-1, 1)  # shared with the pump: 1 once it read the pipe
        self.pump = 0  # its pid

    def start(self) -> None:
        writer = ChunkWriter(self.storage, self.job_id, worker=self.worker, warn=_say)
        writer.begin()  # started_ns in storage before any byte of the stream is printed
        data_r, data_w = os.pipe()
        ctl_r, self._ctl = os.pipe()
        self._ack, ack_w = os.pipe()
        with contextlib.suppress(OSError):
            fcntl.fcntl(data_w, _F_SETPIPE_SZ, PIPE_BYTES)
        _flush_std()  # nothing buffered is printed twice
        # Born with SIGTERM blocked: a pod deleted at once must not end the pump before it
        # ignores SIGTERM; ours stays pending, not lost.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            self.pump = os.fork()
            if self.pump == 0:
                _pump_child(self.storage.uri, writer, (data_r, ctl_r, ack_w), self._read)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            for fd in (data_r, ctl_r, ack_w):
                os.close(fd)
        self._saved = (os.dup(1), os.dup(2))
        os.dup2(data_w, 1)
        os.dup2(data_w, 2)
        self._data = data_w  # kept: sync() asks it what is unread, whatever fd 1 became

    def sync(self) -> bool:
        """Everything printed so far in storage, now (the runner calls it before the job's
        end is decided: a reader that sees the job terminal finds its whole log)."""
        if self._saved is None:
            return True
        _flush_std()
        if _unread(self._data) == 0 and self._read[0] == 0:  # in that order: see pump()
            return True  # nothing was printed: nothing to wait for
        try:
            os.write(self._ctl, b"s")
            ready, _, _ = select.select([self._ack], [], [], SYNC_SECONDS)
            return bool(ready) and os.read(self._ack, 1) == b"1"
        except OSError:
            return False

    def stop(self) -> None:
        """Give fds 1 and 2 back; the pump drains the pipe, writes the rest and marks the
        stream ended. Bounded: a child still holding the pipe keeps the pump (not us)."""
        if self._saved is None:
            return
        saved, self._saved = self._saved, None
        _flush_std()
        for fd, original in zip((1, 2), saved, strict=True):
            os.dup2(original, fd)
            os.close(original)
        for fd in (self._ctl, self._ack, self._data):
            with contextlib.suppress(OSError):
                os.close(fd)
        if self.pump:
            from kinetic_core.util.procs import wait_exit

            wait_exit(self.pump, END_SECONDS)  # past it, the pump goes on alone
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pump, os.WNOHANG)


# ---- the pump process --------------------------------------------------------------------
def pump(
    writer: ChunkWriter,
    data_fd: int,
    out_fd: int,
    ctl_fd: int,
    ack_fd: int,
    read: mmap.mmap | None = None,
) -> None:
    """Copy ``data_fd`` to ``out_fd`` and into ``writer`` until its end; a byte on
    ``ctl_fd`` asks for a flush of all that was written so far (acked on ``ack_fd``).
    ``read[0]`` is set before the pipe is first read: the runner, which looks at the
    pipe's unread bytes first and at this mark second, sees any byte printed."""
    stopping, wake = threading.Event(), threading.Event()
    uploader = threading.Thread(target=_upload, args=(writer, stopping, wake), daemon=True)
    uploader.start()
    out_ok, watch = True, [data_fd, ctl_fd]
    while True:
        ready, _, _ = select.select(watch, [], [])
        if ctl_fd in ready:
            if not os.read(ctl_fd, 1):  # the runner let go: read the data to its end
                watch.remove(ctl_fd)
                continue
            out_ok = _drain(data_fd, out_fd, writer, out_ok)
            ok = writer.flush()
            with contextlib.suppress(OSError):
                os.write(ack_fd, b"1" if ok else b"0")
        if data_fd in ready:
            if read is not None:
                read[0] = 1
            data = os.read(data_fd, READ_BYTES)
            if not data:
                break
            out_ok = _forward(out_fd, data, writer, out_ok)
            if writer.pending():
                wake.set()
            if len(data) < READ_BYTES:  # let the job's writes gather: fewer wakeups, the
                time.sleep(GATHER_SECONDS)  # job keeps its core (a full read: no pause)
    stopping.set()
    wake.set()
    uploader.join()
    if writer.dropped:
        _say(f"kinetic: {writer.dropped} bytes of the job's log were not kept in storage\n")


def _drain(data_fd: int, out_fd: int, writer: ChunkWriter, out_ok: bool) -> bool:
    """What waits in the pipe now (the runner wrote it before it asked for a flush)."""
    while _unread(data_fd) > 0:
        out_ok = _forward(out_fd, os.read(data_fd, READ_BYTES), writer, out_ok)
    return out_ok


def _forward(out_fd: int, data: bytes, writer: ChunkWriter, out_ok: bool) -> bool:
    if out_ok:
        out_ok = _write_all(out_fd, data)
    writer.feed(data)
    return out_ok


def _upload(writer: ChunkWriter, stopping: threading.Event, wake: threading.Event) -> None:
    while not stopping.is_set():
        wake.wait(_interval())
        wake.clear()
        if not stopping.is_set():
            writer.flush()
    writer.end()


def _interval() -> float:
    """``KINETIC_LOG_FLUSH_SECONDS`` (read at each wait), else ``FLUSH_SECONDS``."""
    try:
        return max(0.1, float(os.environ["KINETIC_LOG_FLUSH_SECONDS"]))
    except (KeyError, ValueError):
        return FLUSH_SECONDS


def _unread(fd: int) -> int:
    """Bytes waiting in the pipe (FIONREAD)."""
    import termios

    try:
        buf = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
    except OSError:
        return 0
    return int.from_bytes(buf, sys.byteorder)


def _write_all(fd: int, data: bytes) -> bool:
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError:  # stdout closed: storage still gets the bytes
        return False
    return True


def _say(text: str) -> None:
    """A note on stderr: the pump's is the pod's own (never the pipe: no loop)."""
    _write_all(2, text.encode())


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def _pump_child(uri: str, begun: ChunkWriter, fds: tuple[int, int, int], read: mmap.mmap) -> None:
    """The forked pump (``fds``: the pipe's read end, flush requests, acks); never returns.
    It keeps fds 0-2 (1: the original stdout) and ``fds``, nothing else of the runner's:
    not the pipe's write end (the pipe would never end), nor storage connections."""
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # ends at the pipe's end, not before
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # blocked since birth
        low = 3
        for fd in sorted(fds):
            os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, os.sysconf("SC_OPEN_MAX"))
        writer = ChunkWriter(
            open_fresh(uri),
            begun.job_id,
            worker=begun.worker,
            started_ns=begun.started_ns,
            warn=_say,
        )
        pump(writer, fds[0], 1, fds[1], fds[2], read)
        code = 0
    except BaseException as exc:
        _say(f"kinetic: the log pump failed: {exc!r}\n")
    finally:
        os._exit(code)


# ---- the runner's capture ----------------------------------------------------------------
def wanted() -> bool:
    """Tee only where stdout is not already a file kept by the backend (see module doc)."""
    forced = os.environ.get("KINETIC_LOG_TO_STORAGE", "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    try:
        return not stat.S_ISREG(os.fstat(1).st_mode)
    except OSError:
        return False


_active: list[LogCapture] = []


def start(storage: Storage, job_id: str, *, worker: int = 0) -> LogCapture | None:
    """Start the runner's capture (once per process), with ``stop`` at interpreter exit and
    on a SIGTERM that arrives before the runner's own handler; None where not ``wanted``
    or when it cannot start (the job then runs untouched, its log in the pod only)."""
    if _active or not wanted():
        return _active[0] if _active else None
    capture = LogCapture(storage, job_id, worker=worker)
    try:
        capture.start()
    except OSError as exc:
        _say(f"kinetic: the job's log is not kept in storage: {exc}\n")
        return None
    _active.append(capture)
    atexit.register(stop)
    if threading.current_thread() is threading.main_thread():
        with contextlib.suppress(ValueError):
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _stop_and_die)
    return capture


def sync() -> None:
    """Everything the job printed so far in storage (bounded; never raises)."""
    for capture in _active:
        capture.sync()


def stop() -> None:
    """Stop the runner's capture, if any: every byte so far reaches storage. Called as the
    runner ends, so SIGTERM stays blocked from here on: a pod deleted right after the job's
    end was decided neither cuts the last write nor turns the runner's exit code into 143
    (the pending signal dies with the process)."""
    if not _active:
        return
    if threading.current_thread() is threading.main_thread():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    while _active:
        _active.pop().stop()


def _stop_and_die(signum: int, frame: Any) -> None:
    """SIGTERM before the runner handles it: flush, then die by SIGTERM as before."""
    stop()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    os.kill(os.getpid(), signal.SIGTERM)
