"""The local backend: each job is a detached supervisor process on this machine.

Per job, ``{local_dir}/{job_id}/`` holds ``launch.json`` (supervisor pid and process
start time, written by the submitter), ``output.log`` (stdout+stderr) and ``exit.json``
(written by the supervisor when the runner ends, however it ended).
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kinetic_core.backends.local.zygote as zygote
from kinetic_core.backends import BackendState, LaunchSpec
from kinetic_core.config import Target
from kinetic_core.errors import SubmissionError
from kinetic_core.procs import process_alive, start_ticks

LOG_CHUNK = 1 << 20
# Early wake-ups only for small watch sets (a single result() wait): a waiter on many jobs
# woken at every exit would poll once per finished job instead of once per interval.
EARLY_WAKE_MAX = 8
# Supervisors this process launched, kept so they are reaped (no zombies) once they exit.
_children: list[subprocess.Popen[bytes]] = []


def default_local_dir(target: Target) -> str:
    """Beside a file:// storage root; for other storage, one folder per storage URI (job ids
    derived from idempotency keys repeat across storage roots)."""
    if target.local_dir:
        return os.path.expanduser(target.local_dir)
    if target.storage and target.storage.startswith("file://"):
        return os.path.join(target.storage[len("file://") :], "backend-local")
    digest = hashlib.sha256((target.storage or "").encode()).hexdigest()[:16]
    return os.path.expanduser(f"~/.kinetic/backend-local/{digest}")


def _alive(launch: dict[str, Any]) -> bool:
    return process_alive(launch["pid"], launch.get("start_ticks"))


class LocalBackend:
    name = "local"

    def __init__(self, local_dir: str) -> None:
        self.local_dir = Path(local_dir)
        self._launch_cache: dict[str, dict[str, Any]] = {}

    @classmethod
    def from_target(cls, target: Target) -> LocalBackend:
        return cls(default_local_dir(target))

    @property
    def scope(self) -> str:
        return f"local:{self.local_dir}"

    def _dir(self, job_id: str) -> Path:
        return self.local_dir / job_id

    # ---- launch -------------------------------------------------------------------------
    def launch(self, spec: LaunchSpec) -> None:
        job_dir = self._dir(spec.job_id)
        try:
            self.local_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            job_dir.mkdir(mode=0o700)
        except FileExistsError:
            return  # already launched: idempotent
        except OSError as exc:
            raise SubmissionError(f"Cannot create local job directory {job_dir}: {exc}") from exc
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        env["KINETIC_SYS_PATH"] = json.dumps(spec.python_path)
        env.pop("KINETIC_SIGNING_KEY", None)
        if spec.target.signing_key:  # passed in the environment, never written to disk
            env["KINETIC_SIGNING_KEY"] = spec.target.signing_key
        argv = [str(job_dir), str(spec.target.life_span or 0), *spec.runner_args()[2:]]
        log_path = str(job_dir / "output.log")
        cwd = spec.workdir or os.getcwd()
        pid = zygote.launch(argv, env=env, cwd=cwd, log_path=log_path)
        if pid is None:
            pid = self._spawn(argv, env=env, cwd=cwd, log_path=log_path)
        record = {
            "pid": pid,
            "start_ticks": start_ticks(pid),
            "host": socket.gethostname(),
            "launched_at": time.time(),
            "labels": spec.labels,
        }
        tmp = job_dir / "launch.json.tmp"
        tmp.write_text(json.dumps(record))
        tmp.replace(job_dir / "launch.json")

    def _spawn(self, argv: list[str], *, env: dict[str, str], cwd: str, log_path: str) -> int:
        """Start the supervisor in a fresh interpreter (when no zygote is usable)."""
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "kinetic_core.backends.local.supervisor", *argv],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=env,
                start_new_session=True,  # survives the submitter; cancel kills the group
                close_fds=True,
            )
        _children[:] = [p for p in _children if p.poll() is None]
        _children.append(proc)
        return proc.pid

    # ---- observe ------------------------------------------------------------------------
    def _launch_record(self, job_id: str) -> dict[str, Any] | None:
        if job_id not in self._launch_cache:
            try:
                self._launch_cache[job_id] = json.loads(
                    (self._dir(job_id) / "launch.json").read_text()
                )
            except (FileNotFoundError, ValueError):
                return None
        return self._launch_cache[job_id]

    def _exit_record(self, job_id: str) -> dict[str, Any] | None:
        try:
            return json.loads((self._dir(job_id) / "exit.json").read_text())
        except (FileNotFoundError, ValueError):
            return None

    def _state(self, job_id: str) -> BackendState:
        launch = self._launch_record(job_id)
        if launch is None:
            return BackendState("not_found")
        started = launch.get("launched_at")
        exit_rec = self._exit_record(job_id)
        if exit_rec is None:
            if launch.get("host") != socket.gethostname():
                return BackendState(
                    "running",
                    started_at=started,
                    message=f"running on host {launch.get('host')}; liveness cannot be checked from here",
                )
            if _alive(launch):
                return BackendState("running", started_at=started)
            exit_rec = self._exit_record(job_id)  # it may have finished between the two reads
            if exit_rec is None:
                return BackendState(
                    "gone",
                    started_at=started,
                    message=f"supervisor process {launch['pid']} vanished without recording an exit "
                    "(killed with SIGKILL, or the machine restarted)",
                )
        return BackendState(
            "exited",
            exit_code=exit_rec.get("exit_code"),
            reason=exit_rec.get("reason"),
            message=exit_rec.get("message"),
            started_at=started,
            finished_at=exit_rec.get("finished_at"),
        )

    def poll(self, job_ids: list[str]) -> dict[str, BackendState]:
        return {job_id: self._state(job_id) for job_id in job_ids}

    def sleep_until_change(self, job_ids: list[str], timeout: float) -> None:
        """Sleep up to ``timeout``, waking as soon as one of the jobs' supervisors exits.

        A pidfd becomes readable when its process ends, so a waiter on a few jobs notices a
        finished one at once instead of at its next backoff tick. Plain sleep for larger
        watch sets, where pidfds are unavailable, or for jobs on another host.
        """
        if len(job_ids) > EARLY_WAKE_MAX:
            time.sleep(timeout)
            return
        fds: list[int] = []
        try:
            for job_id in job_ids:
                launch = self._launch_record(job_id)
                if launch is None or launch.get("host") != socket.gethostname():
                    continue
                try:
                    fds.append(os.pidfd_open(launch["pid"]))
                except ProcessLookupError:
                    return  # already gone: poll now
                except (AttributeError, OSError):
                    break
            if fds:
                select.select(fds, [], [], timeout)
            else:
                time.sleep(timeout)
        finally:
            for fd in fds:
                os.close(fd)

    # ---- logs ---------------------------------------------------------------------------
    def logs(self, job_id: str, tail: int | None = None) -> str:
        path = self._dir(job_id) / "output.log"
        try:
            with open(path, "rb") as fh:
                if tail is None:
                    return fh.read().decode("utf-8", "replace")
                return _tail(fh, tail)
        except FileNotFoundError:
            return ""

    def read_logs(self, job_id: str, cursor: str | None) -> tuple[str, str | None]:
        offset = int(cursor or 0)
        try:
            with open(self._dir(job_id) / "output.log", "rb") as fh:
                fh.seek(offset)
                data = fh.read(LOG_CHUNK)
        except FileNotFoundError:
            return "", cursor
        if len(data) == LOG_CHUNK and b"\n" in data:  # keep partial last lines for the next read
            data = data[: data.rindex(b"\n") + 1]
        return data.decode("utf-8", "replace"), str(offset + len(data))

    # ---- stop ---------------------------------------------------------------------------
    def cancel(self, job_id: str) -> None:
        launch = self._launch_record(job_id)
        if launch is None or self._exit_record(job_id) is not None or not _alive(launch):
            return
        try:  # the supervisor forwards SIGTERM, escalates to SIGKILL and records the exit
            os.killpg(launch["pid"], signal.SIGTERM)
        except ProcessLookupError:
            pass

    def delete(self, job_id: str) -> None:
        self.cancel(job_id)
        self._launch_cache.pop(job_id, None)
        shutil.rmtree(self._dir(job_id), ignore_errors=True)


def _tail(fh: Any, lines: int) -> str:
    """Last ``lines`` lines, reading backwards in blocks (bounded memory for huge logs)."""
    if lines <= 0:
        return ""
    fh.seek(0, 2)
    pos = fh.tell()
    data = b""
    while pos > 0 and data.count(b"\n") <= lines:
        step = min(64 << 10, pos)
        pos -= step
        fh.seek(pos)
        data = fh.read(step) + data
    return b"\n".join(data.splitlines()[-lines:]).decode("utf-8", "replace") + (
        "\n" if data else ""
    )
