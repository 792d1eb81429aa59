"""The local backend: each job is a detached supervisor process on this machine.

Per job, ``{local_dir}/{job_id}/`` holds ``launch.json`` (the supervisor's pid and process
start time, written create-only by the supervisor itself before anything runs, bound to
the job id and signed when a signing key is set), ``output.log`` (stdout+stderr) and
``exit.json`` (written by the supervisor when the runner ends, however it ended). While a
process submits a job it holds a marker in ``{local_dir}/.submitting/{job_id}/``: a job
whose submitter died before launching reads as gone at once, not as "Submitting".
A launch that fails is undone completely (the directory goes, anything forked is killed),
so a retry with the same job id starts clean. Deleting a job keeps its log in storage
(``jobs/{id}/output.log``); ``logs`` reads it from there once the local copy is gone.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kinetic_core.backends.local.launch_record as launch_record
import kinetic_core.backends.local.zygote as zygote
from kinetic_core.backends import BackendState, LaunchSpec, running
from kinetic_core.config.target import DEBUG_HOLD, Target
from kinetic_core.errors import SubmissionError
from kinetic_core.records import layout
from kinetic_core.states import Reason
from kinetic_core.storage import open_storage
from kinetic_core.util import signing
from kinetic_core.util.ids import validate_id
from kinetic_core.util.ports import PortForward, PortSpec, already_local
from kinetic_core.util.procs import (
    group_members,
    process_alive,
    signal_all,
    start_ticks,
    stdout_of,
    wait_exit,
)

LOG_CHUNK = 1 << 20
# Early wake-ups only for small watch sets (a single result() wait): a waiter on many jobs
# woken at every exit would poll once per finished job instead of once per interval.
EARLY_WAKE_MAX = 8
SUBMITTING = ".submitting"
# A job directory this young without a launch record may be a supervisor mid-fork.
STARTUP_GRACE = 10.0
CANCEL_WAIT = 1.0
ENDING_WAIT = 2.0  # a decided job's last records and exit, before delete() stops it
# The key each job launched by this process was signed with (None: unsigned). Its launch
# record is verified with that key here, whatever key the environment holds by then: a job
# in flight when a secret rotates must not read as gone (Lost would start a recovery beside
# it). Jobs launched elsewhere are verified with the observing backend's key.
_launch_keys: dict[Path, str | None] = {}  # by job directory: ids repeat across storages


def default_local_dir(target: Target) -> str:
    """Beside a file:// storage root; for other storage, one folder per storage URI (job ids
    derived from idempotency keys repeat across storage roots)."""
    if target.local_dir:
        return os.path.expanduser(target.local_dir)
    if target.storage and target.storage.startswith("file://"):
        return os.path.join(target.storage[len("file://") :], "backend-local")
    digest = hashlib.sha256((target.storage or "").encode()).hexdigest()[:16]
    return os.path.expanduser(f"~/.kinetic/backend-local/{digest}")


def _deadline(target: Target) -> float:
    """The supervisor's deadline (0: none): ``life_span``, plus the debug hold for a
    ``debug=True`` job, so a failure held for inspection is not cut at ``life_span``
    (status resolution still enforces ``life_span`` on a function that runs too long)."""
    if not target.life_span:
        return 0
    return target.life_span + (DEBUG_HOLD if target.debug else 0)


def _owns(launch: dict[str, Any], log_path: Path) -> bool:
    """Is the recorded process alive and really this job's supervisor (its stdout is the
    job's log)? Only then may it be signalled: a pid alone can name anyone's process."""
    if not process_alive(launch["pid"], launch.get("start_ticks")):
        return False
    target = stdout_of(launch["pid"])
    if target is None:
        return not os.path.isdir("/proc/self")  # no /proc to check against
    return target == os.path.realpath(log_path)


def _ending(launch: dict[str, Any], timeout: float = CANCEL_WAIT) -> bool:
    """Is the supervisor still alive after ``timeout`` to end on its own? Asked of a job
    that is ending (its exit recorded, or its outcome decided): it exits within
    milliseconds, and a job reads terminal only once none of its processes is left."""
    if not process_alive(launch["pid"], launch.get("start_ticks")):
        return False
    wait_exit(launch["pid"], timeout)
    return process_alive(launch["pid"], launch.get("start_ticks"))


def _stop_orphans(launch: dict[str, Any], log_path: Path) -> None:
    """Stop what is left of a job whose supervisor died (SIGKILLed, say): the processes of
    its group. Nobody else will escalate, so: SIGTERM, the kill grace, then SIGKILL; a
    cancel returns once none of them is left. Signalled only when a member writes to the
    job's log: a record alone (forged, or naming a reused pid) proves nothing."""
    if launch.get("host") != socket.gethostname():
        return
    group = launch["pid"], launch.get("start_ticks")
    members = group_members(group[0], leader_ticks=group[1])
    log = os.path.realpath(log_path)
    if not any(stdout_of(pid) in (log, f"{log} (deleted)") for pid in members):
        return
    signal_all(members, signal.SIGTERM)
    deadline = time.monotonic() + float(os.environ.get("KINETIC_KILL_GRACE", "5"))
    for pid in members:
        wait_exit(pid, max(0.0, deadline - time.monotonic()))
    left = group_members(group[0], leader_ticks=group[1])
    signal_all(left, signal.SIGKILL)
    for pid in left:
        wait_exit(pid, CANCEL_WAIT)


def _read_chunk(fh: Any, offset: int) -> bytes:
    fh.seek(offset)
    data = fh.read(LOG_CHUNK)
    if len(data) == LOG_CHUNK and b"\n" in data:  # keep partial last lines for the next read
        data = data[: data.rindex(b"\n") + 1]
    return data


class LocalBackend:
    name = "local"

    def __init__(
        self, local_dir: str, storage_uri: str | None = None, signing_key: str | None = None
    ) -> None:
        self.local_dir = Path(local_dir)
        self.storage_uri = storage_uri
        self.signing_key = signing_key
        self._launch_cache: dict[str, dict[str, Any]] = {}

    @classmethod
    def from_target(cls, target: Target) -> LocalBackend:
        # A handle's target carries no secret: readers verify with the key in their env.
        return cls(
            default_local_dir(target), target.storage, signing.key_in_force(target.signing_key)
        )

    @property
    def scope(self) -> str:
        return f"local:{self.local_dir}"

    def _dir(self, job_id: str) -> Path:
        return self.local_dir / validate_id(job_id)

    def port_forward(
        self, job_id: str, ports: list[PortSpec], worker: int | None = None
    ) -> PortForward:
        """Nothing to open: the job's processes run on this machine, their ports are local."""
        return already_local(ports, f"local backend, job {job_id}")

    # ---- launch -------------------------------------------------------------------------
    @contextlib.contextmanager
    def submitting(self, job_id: str) -> Iterator[None]:
        """Mark this process as the job's submitter while it creates and launches it."""
        markers = self.local_dir / SUBMITTING / validate_id(job_id)
        # pid and start time name the submitter; the rest tells its threads apart.
        marker = markers / f"{os.getpid()}-{start_ticks(os.getpid())}-{uuid.uuid4().hex[:8]}"
        # Another submitter of the job may remove the empty folder at any moment: between
        # our mkdir and touch (FileNotFoundError), or inside mkdir, between its "exists"
        # and its "is a directory" checks (FileExistsError). Both mean: try again.
        for last in [False] * 9 + [True]:
            try:
                markers.mkdir(mode=0o700, parents=True, exist_ok=True)
                marker.touch(exist_ok=False)
                break
            except (FileNotFoundError, FileExistsError):
                if last:
                    raise SubmissionError(
                        f"Cannot create {marker}: its folder keeps vanishing"
                    ) from None
            except OSError as exc:
                raise SubmissionError(
                    f"Cannot write to the local job directory {markers}: {exc}"
                ) from exc
        try:
            yield
        finally:
            marker.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                markers.rmdir()

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
        env.pop("KINETIC_LAUNCH_FD", None)
        if spec.target.signing_key:  # passed in the environment, never written to disk
            env["KINETIC_SIGNING_KEY"] = spec.target.signing_key
        _launch_keys[job_dir] = spec.target.signing_key  # what its supervisor signs with
        argv = [str(job_dir), str(_deadline(spec.target)), *spec.runner_args()[2:]]
        log_path = str(job_dir / launch_record.LOG)
        cwd = spec.workdir or os.getcwd()
        channel = None
        try:
            channel = zygote.launch(argv, env=env, cwd=cwd, log_path=log_path)
            if channel is None:
                channel = self._spawn(argv, env=env, cwd=cwd, log_path=log_path)
            self._confirm(spec.job_id, channel)
        except BaseException:
            self._abort(spec.job_id)
            raise
        finally:
            if channel is not None:
                channel.close()

    def _spawn(
        self, argv: list[str], *, env: dict[str, str], cwd: str, log_path: str
    ) -> socket.socket:
        """Start the supervisor in a fresh interpreter (when no zygote is usable). It
        detaches (forks, its parent exits at once and is reaped here: no zombie)."""
        ours, theirs = socket.socketpair()
        try:
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "kinetic_core.backends.local.supervisor",
                        "--detach",
                        *argv,
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=cwd,
                    env={**env, "KINETIC_LAUNCH_FD": str(theirs.fileno())},
                    pass_fds=(theirs.fileno(),),
                    close_fds=True,
                )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        proc.wait()
        return ours

    def _confirm(self, job_id: str, channel: socket.socket) -> None:
        """Read the supervisor's pid (it has claimed the job), then let it run ("go")."""
        channel.settimeout(zygote.REPLY_TIMEOUT)
        if not zygote.read_line(channel).strip().isdigit():
            tail = self.logs(job_id, tail=5).strip()
            raise SubmissionError(
                f"The local supervisor of job {job_id} did not start"
                + (f": {tail}" if tail else " (its process ended before answering)")
                + ". Nothing ran; submit again (with the same idempotency_key it starts "
                "cleanly), or set KINETIC_LOCAL_ZYGOTE=0 if this repeats."
            )
        channel.sendall(b"go")

    def _abort(self, job_id: str) -> None:
        """Undo a launch: nothing of it may run or read as launched afterwards."""
        self._launch_cache.pop(job_id, None)
        _launch_keys.pop(self._dir(job_id), None)
        aborted = self.local_dir / f".aborted-{job_id}-{os.getpid()}-{time.time_ns()}"
        try:  # after the rename no supervisor can claim the job (its path is gone)
            os.rename(self._dir(job_id), aborted)
        except OSError:
            return
        launch, _ = self._read_launch(aborted, job_id)
        if launch is not None and _owns(launch, aborted / launch_record.LOG):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(launch["pid"], signal.SIGKILL)
        shutil.rmtree(aborted, ignore_errors=True)

    # ---- observe ------------------------------------------------------------------------
    def _key_for(self, job_id: str) -> str | None:
        """The key ``job_id``'s launch record is verified with (see ``_launch_keys``)."""
        return _launch_keys.get(self._dir(job_id), self.signing_key)

    def _read_launch(self, job_dir: Path, job_id: str) -> tuple[dict[str, Any] | None, str | None]:
        """The launch record if it can be trusted for ``job_id``; else why not."""
        try:
            record = json.loads((job_dir / launch_record.LAUNCH).read_text())
        except (FileNotFoundError, ValueError):
            return None, None
        problem = (
            launch_record.verify(record, job_id, self._key_for(job_id))
            if isinstance(record, dict)
            else "not an object"
        )
        return (None, problem) if problem else (record, None)

    def _launch_record(self, job_id: str) -> tuple[dict[str, Any] | None, str | None]:
        if job_id in self._launch_cache:
            return self._launch_cache[job_id], None
        record, problem = self._read_launch(self._dir(job_id), job_id)
        if record is not None:
            self._launch_cache[job_id] = record
        return record, problem

    def _exit_record(self, job_id: str) -> dict[str, Any] | None:
        try:
            return json.loads((self._dir(job_id) / launch_record.EXIT).read_text())
        except (FileNotFoundError, ValueError):
            return None

    def _state(self, job_id: str) -> BackendState:
        launch, problem = self._launch_record(job_id)
        if problem:
            return BackendState("gone", message=f"the job's launch record is refused: {problem}")
        if launch is None:
            return self._unlaunched(job_id)
        started = launch.get("launched_at")
        exit_rec = self._exit_record(job_id)
        if exit_rec is None:
            if launch.get("host") != socket.gethostname():
                return BackendState(
                    "running",
                    started_at=started,
                    message=f"running on host {launch.get('host')}; liveness cannot be checked from here",
                )
            if process_alive(launch["pid"], launch.get("start_ticks")) and (
                not self._runner_decided(job_id) or _ending(launch)
            ):
                return BackendState("running", started_at=started)
            exit_rec = self._exit_record(job_id)  # it may have finished between the two reads
            if exit_rec is None:
                if group_members(launch["pid"], leader_ticks=launch.get("start_ticks")):
                    return BackendState(  # Lost only once none of its processes is left
                        "running",
                        started_at=started,
                        message="the supervisor died; its processes are ending",
                    )
                return BackendState(
                    "gone",
                    started_at=started,
                    message=f"supervisor process {launch['pid']} vanished without recording an exit "
                    "(killed with SIGKILL, or the machine restarted)",
                )
        if launch.get("host") == socket.gethostname() and _ending(launch):
            return BackendState("running", started_at=started, message="the job is ending")
        return BackendState(
            "exited",
            exit_code=exit_rec.get("exit_code"),
            reason=exit_rec.get("reason"),
            message=exit_rec.get("message"),
            started_at=started,
            finished_at=exit_rec.get("finished_at"),
            # The supervisor says so when it never let the runner go (older ones do not).
            ran=False if exit_rec.get("ran") is False else None,
        )

    def _runner_decided(self, job_id: str) -> bool:
        """Whether the job's runner decided its outcome: the function has returned and its
        processes end within milliseconds, so a read waits for them (``_ending``): a job
        reads terminal only once none of its processes is left. Asked of file:// storage
        only (a local read; on gs:// a request per running job per poll is not worth it)."""
        if not self.storage_uri or not self.storage_uri.startswith("file://"):
            return False
        from kinetic_core.records.lifecycle import BY_RUNNER, read_outcome

        outcome = read_outcome(open_storage(self.storage_uri), job_id)
        return outcome is not None and outcome.get("by") == BY_RUNNER

    def _unlaunched(self, job_id: str) -> BackendState:
        """No launch record: being submitted, or its submitter died before launching it."""
        submitters = []
        with contextlib.suppress(OSError):
            for marker in os.listdir(self.local_dir / SUBMITTING / job_id):
                pid, ticks, _ = [*marker.split("-"), "", ""][:3]
                submitters.append((int(pid), int(ticks) if ticks.isdigit() else None))
        if any(process_alive(pid, ticks) for pid, ticks in submitters):
            return BackendState(
                "pending", reason=Reason.SUBMITTING, message="the submitter is launching it"
            )
        try:
            young = time.time() - self._dir(job_id).stat().st_mtime < STARTUP_GRACE
        except OSError:
            young = False
        if young:  # a supervisor may be forked and about to claim it
            return BackendState("pending", reason=Reason.SUBMITTING, message="the job is starting")
        if self._read_launch(self._dir(job_id), job_id) != (None, None):
            return self._state(job_id)  # launched between the two reads
        if submitters:
            return BackendState(
                "gone",
                message=f"its submitter (pid {submitters[0][0]}) died before launching it; "
                "the function never ran",
                ran=False,
            )
        return BackendState("not_found")

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
                launch, _ = self._launch_record(job_id)
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
    def _open_log(self, job_id: str) -> Any:
        """The local log, or the copy kept in storage once the local one was deleted."""
        try:
            return open(self._dir(job_id) / launch_record.LOG, "rb")
        except FileNotFoundError:
            pass
        if not self.storage_uri:
            return io.BytesIO()
        try:
            data = open_storage(self.storage_uri).read_bytes(layout.job_file(job_id, layout.LOG))
        except FileNotFoundError:
            data = b""
        return io.BytesIO(data)

    def logs(self, job_id: str, tail: int | None = None, worker: int | None = None) -> str:
        """The job's log (a local job is one worker: ``worker`` is None or 0)."""
        with self._open_log(job_id) as fh:
            if tail is None:
                return fh.read().decode("utf-8", "replace")
            return _tail(fh, tail)

    def read_logs(
        self, job_id: str, cursor: str | None, worker: int | None = None
    ) -> tuple[str, str | None]:
        offset = int(cursor or 0)
        with self._open_log(job_id) as fh:
            data = _read_chunk(fh, offset)
        return data.decode("utf-8", "replace"), str(offset + len(data))

    def log_complete(self, job_id: str, worker: int | None = None) -> bool:
        """No process of the job writes its log any more (the job itself writes it): none
        runs, or the failed runner is held for debugging (it prints nothing more); a job of
        another host writes no log here: nothing to wait for."""
        launch, _ = self._launch_record(job_id)
        if launch is not None and launch.get("host") != socket.gethostname():
            return True
        return not running(self._state(job_id)) or self._held(job_id)

    def _held(self, job_id: str) -> bool:
        if not self.storage_uri:
            return False
        from kinetic_core.runtime import (
            debugging,  # only asked while a process of an ended job runs
        )

        return debugging.held(open_storage(self.storage_uri), job_id) is not None

    def _keep_log(self, job_id: str) -> bool:
        """Copy the log into storage before the local one is deleted; False if it cannot be."""
        if not self.storage_uri:
            return True
        try:
            with open(self._dir(job_id) / launch_record.LOG, "rb") as src:
                if not os.fstat(src.fileno()).st_size:
                    return True  # nothing to keep: a missing copy reads as the empty log
                storage = open_storage(self.storage_uri)
                with storage.open_write(layout.job_file(job_id, layout.LOG)) as dst:
                    shutil.copyfileobj(src, dst)
        except FileNotFoundError:
            return True
        except Exception:  # e.g. read-only storage: keep the local records instead
            return False
        return True

    # ---- stop ---------------------------------------------------------------------------
    def cancel(self, job_id: str) -> None:
        launch, _ = self._launch_record(job_id)
        if launch is None or self._exit_record(job_id) is not None:
            return  # not claimed yet: the runner checks the stop marker before it starts
        if not _owns(launch, self._dir(job_id) / launch_record.LOG):
            _stop_orphans(launch, self._dir(job_id) / launch_record.LOG)
            return
        try:  # the supervisor forwards SIGTERM, escalates to SIGKILL and records the exit
            os.killpg(launch["pid"], signal.SIGTERM)
        except ProcessLookupError:
            return
        # Most jobs end within milliseconds: wait that long, so the caller's next read
        # finds them stopped (bounded: a job that traps SIGTERM ends after its grace).
        wait_exit(launch["pid"], CANCEL_WAIT)

    def delete(self, job_id: str) -> None:
        """Remove the job's own directory under ``local_dir`` (the path comes from the
        validated id, never from a record), keeping its log in storage.

        Callers delete ended jobs (``cleanup`` cancels a running one first). A job can read
        terminal once its outcome is decided, while its runner still writes its last
        records and its supervisor the exit: it gets ``ENDING_WAIT`` to end on its own
        before it is stopped."""
        launch, _ = self._launch_record(job_id)
        if launch is not None and launch.get("host") == socket.gethostname():
            _ending(launch, ENDING_WAIT)
        self.cancel(job_id)
        self._launch_cache.pop(job_id, None)
        if self._keep_log(job_id):
            shutil.rmtree(self._dir(job_id), ignore_errors=True)
            _launch_keys.pop(self._dir(job_id), None)
        shutil.rmtree(self.local_dir / SUBMITTING / job_id, ignore_errors=True)


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
