"""A warm process that forks local job supervisors, so jobs skip interpreter start-up.

A fresh interpreter plus cloudpickle costs ~50 ms per local job; forking a process that
already imported the runner costs ~1 ms. One zygote runs per user, Python executable and
kinetic_core version, listening on a unix socket in a private (0700) directory; it exits
after ``IDLE_SECONDS`` without requests. Exactly one zygote serves a socket (it holds an
flock on ``<socket>.lock``; ``<socket>.pid`` names it). Each forked child becomes a
session leader, switches to the submitter's environment, working directory (also first on
``sys.path``, as ``python -m`` puts it) and log file, and runs the supervisor exactly as
``python -m kinetic_core.backends.local.supervisor`` would, talking to the submitter over
the request's own connection. The zygote itself never writes to a client: a submitter
that vanishes affects only its own launch.

The fork is made ahead of the request: one spare child waits on a socketpair for the next
accepted connection (passed as a file descriptor), reads the request itself and becomes
that job's supervisor, while the zygote forks the next spare off the submitter's path. A
spare that died is noticed when the zygote hands it a connection (the send fails) and the
zygote forks for that request as before; a spare whose zygote died reads the socketpair's
end and exits, so no spare outlives its zygote.

Set ``KINETIC_LOCAL_ZYGOTE=0`` to start every job in a fresh interpreter instead;
``KINETIC_ZYGOTE_SOCKET`` names another socket (in a private directory), e.g. for tests.
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import hashlib
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

# kinetic_core's own folder (three levels up from kinetic_core/backends/local/zygote.py).
PACKAGE = Path(__file__).resolve().parents[2]
IDLE_SECONDS = 300.0
START_TIMEOUT = 15.0
REPLY_TIMEOUT = 30.0
REQUEST_TIMEOUT = 10.0  # a client sends its request right after connecting
_zygotes: list[subprocess.Popen[bytes]] = []  # ours to reap once they exit
_fingerprint: str | None = None


def enabled() -> bool:
    return os.environ.get("KINETIC_LOCAL_ZYGOTE", "1").lower() not in ("0", "false", "no", "off")


def _version_fingerprint() -> str:
    """Executable + kinetic_core source state: edited code never runs in an old zygote."""
    global _fingerprint
    if _fingerprint is None:
        mtimes = sorted(p.stat().st_mtime_ns for p in PACKAGE.rglob("*.py"))
        raw = f"{sys.executable}|{PACKAGE}|{mtimes[-1] if mtimes else 0}|{len(mtimes)}"
        _fingerprint = hashlib.sha256(raw.encode()).hexdigest()[:16]
    return _fingerprint


def socket_path() -> str | None:
    """The zygote socket, in a directory only this user can enter; None if that is unsafe."""
    chosen = os.environ.get("KINETIC_ZYGOTE_SOCKET")
    directory = (
        Path(chosen).parent if chosen else Path(tempfile.gettempdir()) / f"kinetic-{os.getuid()}"
    )
    try:
        directory.mkdir(mode=0o700, exist_ok=True)
        info = directory.stat()
    except OSError:
        return None
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None  # someone else's or too open: do not trust sockets in it
    return chosen or str(directory / f"zygote-{_version_fingerprint()}.sock")


# ---- client -----------------------------------------------------------------------------


def launch(
    argv: list[str], *, env: dict[str, str], cwd: str, log_path: str
) -> socket.socket | None:
    """Ask the zygote to fork a supervisor; the connection to that supervisor (it answers
    with its pid and waits for "go"), or None if no zygote is usable (the caller then
    starts a fresh interpreter). Once the request was sent, failures raise."""
    path = socket_path() if enabled() else None
    if path is None:
        return None
    reap()
    request = json.dumps({"argv": argv, "env": env, "cwd": cwd, "log": log_path}).encode() + b"\n"
    for first_try in (True, False):
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(REPLY_TIMEOUT)
        try:
            conn.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            conn.close()
            if not first_try or not _start(path):
                return None
            continue
        try:
            conn.sendall(request)
        except BaseException:
            conn.close()
            raise
        return conn
    return None


def reap() -> None:
    """Reap the zygotes this process started that have exited (killed, idle, or "busy":
    another one held the socket); each launch does it first."""
    _zygotes[:] = [z for z in _zygotes if z.poll() is None]


def _start(path: str) -> bool:
    """Start a zygote and wait for its "ready" line (no polling: a blocking pipe read);
    "busy" means another one holds the socket."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from {__name__} import serve; serve({path!r}, {IDLE_SECONDS})",
        ],
        cwd="/",  # hold no submitter's directory; each job chdirs to its own
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": _package_root()},
    )
    _zygotes.append(proc)
    assert proc.stdout is not None
    readable, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT)
    ready = proc.stdout.readline() if readable else b""
    proc.stdout.close()
    return ready.strip() in (b"ready", b"busy")


def _package_root() -> str:
    """Where kinetic_core itself is imported from (the zygote needs nothing else)."""
    return str(PACKAGE.parent)


def read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


# ---- server -----------------------------------------------------------------------------


def serve(path: str, idle: float) -> None:
    lock = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print("busy", flush=True)  # one zygote per socket: the holder serves it
        return
    import kinetic_core.backends.local.supervisor as supervisor

    _preload()

    # Jobs put their submitter's sys.path first (KINETIC_SYS_PATH); the zygote's own
    # working-directory entry goes, so it never shadows a later job's modules.
    sys.path[:] = [p for p in sys.path if p not in ("", "/")]

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps exited supervisors
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    staging = f"{path}.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(staging)
    server.bind(staging)
    server.listen(128)
    os.replace(staging, path)  # atomic: a dead zygote's socket is simply replaced
    with open(f"{path}.pid.tmp", "w") as fh:  # forked jobs share its command line: this names it
        fh.write(str(os.getpid()))
    os.replace(f"{path}.pid.tmp", f"{path}.pid")
    server.settimeout(idle)
    print("ready", flush=True)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    closing = False
    spare: socket.socket | None = None
    try:
        while True:
            if spare is None and not closing:  # after the last hand-over: off its path
                spare = _fork_spare(server, lock, supervisor.main)
            try:
                conn, _ = server.accept()
            except (TimeoutError, BlockingIOError):
                if closing:
                    return
                # Idle: unlink first (the next launch starts a fresh zygote), then serve
                # whoever connected in between rather than leave them unanswered.
                closing = True
                os.unlink(path)
                server.settimeout(0)
                continue
            except OSError:
                continue
            with conn:  # every operation on one client's connection affects only that client
                handed = spare is not None and _hand_over(spare, conn)
                spare = None  # handed over, or dead: the next one is forked after this request
                if not handed:  # no spare (it died, or could not be forked): fork for this one
                    try:
                        conn.settimeout(REQUEST_TIMEOUT)
                        request = json.loads(read_line(conn))
                        pid = os.fork()
                    except (OSError, ValueError):
                        continue
                    if pid == 0:
                        server.close()
                        os.close(lock)  # the socket's lock stays with the zygote alone
                        _become_supervisor(request, supervisor.main, conn)
    finally:
        with contextlib.suppress(FileNotFoundError):
            if not closing:
                os.unlink(path)  # ours: we hold the lock, so no other zygote bound it
            os.unlink(f"{path}.pid")


def _fork_spare(server: socket.socket, lock: int, run: Any) -> socket.socket | None:
    """Fork the spare that serves the next request; the zygote's end of its socketpair,
    or None when the fork failed (the next request is then forked for)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        pid = os.fork()
    except OSError:
        ours.close()
        theirs.close()
        return None
    if pid == 0:
        server.close()
        os.close(lock)  # the socket's lock stays with the zygote alone
        ours.close()
        _await_request(theirs, run)
    theirs.close()
    return ours


def _hand_over(spare: socket.socket, conn: socket.socket) -> bool:
    """Pass an accepted connection to the spare; False if it is gone (the send fails)."""
    try:
        socket.send_fds(spare, [b"c"], [conn.fileno()])
        return True
    except OSError:
        return False
    finally:
        spare.close()


def _await_request(channel: socket.socket, run: Any) -> None:
    """In the spare: wait for a connection, read its request, supervise. Never returns;
    the socketpair's end (the zygote exited or was killed) ends the spare."""
    code = 0
    try:
        _, fds, _, _ = socket.recv_fds(channel, 1, 1)
        channel.close()
        if fds:
            conn = socket.socket(fileno=fds[0])
            conn.settimeout(REQUEST_TIMEOUT)
            request = json.loads(read_line(conn))
            _become_supervisor(request, run, conn)
    except (OSError, ValueError):
        code = 2  # this request's launch fails (its submitter sees the connection end)
    finally:
        os._exit(code)


def _preload() -> None:
    """Load once here what every forked job would otherwise load on its critical path."""
    import tempfile

    import kinetic_core.runtime.runner  # every job runs it
    import kinetic_core.storage.local  # every local job's runner opens file://
    from kinetic_core.records import chunks
    from kinetic_core.runtime import telemetry
    from kinetic_core.util import procs

    for name in kinetic_core.runtime.runner.AFTER_START:  # what it imports once started
        importlib.import_module(name)
    telemetry.nvml_module()  # the last sample of each job asks: searched for once, here
    procs.libc()  # ctypes and libc: the supervisor's prctl calls (~5 ms to import)
    chunks.blake3_available()  # the envelope hash: blake3 where installed
    tempfile.gettempdir()  # cached: its first call probes the directory by writing a file
    # What is loaded stays out of the collector's reach: a collection in a forked job would
    # otherwise touch every inherited object and copy each page it sits on (copy-on-write).
    gc.freeze()


def _become_supervisor(request: dict[str, Any], run: Any, conn: socket.socket) -> None:
    """In the forked child: take on the submitter's context, then supervise. Never returns."""
    code = 2
    try:
        os.setsid()  # its own session and process group: cancel kills the group
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the supervisor waits for its runner
        if request.get("cwd"):
            os.chdir(request["cwd"])
        sys.path.insert(0, os.getcwd())  # as `python -m` does: the working dir is importable
        os.environ.clear()
        os.environ.update(request["env"])
        log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        code = run(request["argv"], conn)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.write(2, f"kinetic zygote: cannot start supervisor: {exc!r}\n".encode())
    finally:
        os._exit(code)
