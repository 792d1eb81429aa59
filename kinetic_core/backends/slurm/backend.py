"""The slurm backend: one Slurm batch job per kinetic job, found by its name.

Per job, ``{slurm_dir}/{job_id}/`` (on a filesystem every node shares) holds
``launch.lock`` (held while a process submits it: launches of one job id, in any thread or
process, take turns), ``slurm_job_id`` (written once sbatch answered), ``batch.log`` (the
batch script's output: srun's and Slurm's own messages) and ``worker-N.log`` (each node's
runner). A launch first asks Slurm for a job of its name, so an sbatch whose answer was lost
is found, never submitted twice. ``poll`` is one ``squeue --json`` for all its jobs. A job
Slurm no longer knows (``MinJobAge`` passed, or the controller lost its state) is decided by
its outcome in storage; undecided, it reads running (or pending) for ``lost_grace``, then
gone (Lost). Deleting a job removes its folder; its log stays in storage (the runner keeps
it there).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kinetic_core.backends.slurm.cli as cli
from kinetic_core.backends import BackendState, LaunchSpec, running
from kinetic_core.backends.slurm.kind import NAME_PREFIX, default_slurm_dir, job_name
from kinetic_core.backends.slurm.script import WORKER_LOG, batch_script, sbatch_argv
from kinetic_core.backends.slurm.states import ENDED, job_state
from kinetic_core.config.target import DEFAULT_LOST_GRACE, Target
from kinetic_core.errors import BackendError, SubmissionError, WaitTimeout
from kinetic_core.records import log_chunks
from kinetic_core.records.layout import STARTED, job_file
from kinetic_core.records.lifecycle import BY_RUNNER, read_outcome, workers_left
from kinetic_core.runtime import decided_stop, signals
from kinetic_core.states import Reason
from kinetic_core.storage import Storage, open_storage
from kinetic_core.util import signing
from kinetic_core.util.ids import validate_id
from kinetic_core.util.retrying import transient_retry
from kinetic_core.util.waits import ticks

LOCK = "launch.lock"
LIVE = "PD,CF,R,S,CG"  # squeue's states of a job with (or about to have) processes
SLURM_ID = "slurm_job_id"
LOG_CHUNK = 1 << 20
#: Seconds a cancel waits for Slurm to confirm that every process of the job is gone (the
#: job leaves COMPLETING: Slurm's KillWait between SIGTERM and SIGKILL, then the nodes'
#: reports); a job still ending after it is observed again later.
CANCEL_WAIT = 45.0
#: How long ``delete`` lets a job that ran to its end leave Slurm by itself (see there).
EXIT_GRACE = 10.0
#: Seconds within which a task Slurm cannot reach stops itself once the job's end is
#: decided: the runner's storage tick, its kill grace, and room for a loaded node.
SELF_STOP_S = signals.POLL_SECONDS + decided_stop.GRACE_SECONDS + 8.0
#: Slurm ends that say a node failed: its tasks there are not known to be gone.
NODE_ENDS = frozenset({"NODE_FAIL", "BOOT_FAIL"})


def _python() -> str:
    """The interpreter the runner uses on the nodes: this one, at the same path (the
    cluster shares the environment, as it shares the folder)."""
    return os.environ.get("KINETIC_SLURM_PYTHON") or sys.executable


class SlurmBackend:
    name = "slurm"

    def __init__(
        self,
        slurm_dir: str,
        storage_uri: str | None = None,
        signing_key: str | None = None,
        lost_grace: float | None = None,
    ) -> None:
        self.slurm_dir = Path(slurm_dir)
        self.storage_uri = storage_uri
        self.signing_key = signing_key
        self.lost_grace = lost_grace or DEFAULT_LOST_GRACE
        self._missing: dict[str, float] = {}  # job id -> when Slurm was first seen without it

    @classmethod
    def from_target(cls, target: Target) -> SlurmBackend:
        return cls(
            default_slurm_dir(target),
            target.storage,
            signing.key_in_force(target.signing_key),
            target.lost_grace,
        )

    @property
    def scope(self) -> str:
        return f"slurm:{os.environ.get('SLURM_CONF', '')}:{self.slurm_dir}"

    def _dir(self, job_id: str) -> Path:
        return self.slurm_dir / validate_id(job_id)

    # ---- launch -------------------------------------------------------------------------
    def check_launch(self, spec: LaunchSpec) -> None:
        """Ask Slurm whether it would take the job (``sbatch --test-only``: the partition,
        account, qos, shape and time limit exist and fit) before anything is written."""
        argv = sbatch_argv(spec, str(self._dir(spec.job_id)))
        cli.run([*argv, "--test-only"], stdin=batch_script(spec, "/tmp", _python()))

    def launch(self, spec: LaunchSpec) -> None:
        """Submit the job once: under the job's lock, a job id Slurm already has (by name)
        is not submitted again. A transient failure is retried by asking again first."""
        folder = self._dir(spec.job_id)
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise SubmissionError(
                f"Cannot create the Slurm job folder {folder}: {exc}. slurm_dir must be a "
                "writable folder on a filesystem every node shares."
            ) from exc
        with self._claim(folder):
            transient_retry(cli.transient).copy()(self._submit_once, spec, folder)

    @contextlib.contextmanager
    def _claim(self, folder: Path) -> Iterator[None]:
        """The job's launch lock (flock: per open file, so threads of one process take
        turns too; released by the kernel when a submitter dies)."""
        fd = os.open(folder / LOCK, os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _submit_once(self, spec: LaunchSpec, folder: Path) -> None:
        if (folder / SLURM_ID).exists():
            return
        found = self._find(spec.job_id)
        if found is not None:  # an earlier sbatch took it; its answer was lost
            self._record_id(folder, found)
            return
        env = self._job_env(spec)
        try:
            out = cli.run(
                sbatch_argv(spec, str(folder)),
                stdin=batch_script(spec, str(folder), _python()),
                env=env,
                retry=False,  # whether a failed submit took effect is asked first (_find)
            )
        except BackendError as exc:
            if not exc.transient:
                shutil.rmtree(folder, ignore_errors=True)
            raise
        except Exception:
            shutil.rmtree(folder, ignore_errors=True)  # refused: nothing was submitted
            raise
        slurm_id = out.strip().split(";")[0]
        self._record_id(folder, slurm_id)

    def _record_id(self, folder: Path, slurm_id: str) -> None:
        tmp = folder / f".{SLURM_ID}.{os.getpid()}"
        tmp.write_text(slurm_id)
        os.replace(tmp, folder / SLURM_ID)

    def _job_env(self, spec: LaunchSpec) -> dict[str, str]:
        """The submitter's environment for the job (sbatch exports it), without another
        job's Slurm variables, with the signing key passed as a secret (never written)."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not (k.startswith("SLURM_") and k != "SLURM_CONF")
            and k not in ("KINETIC_SIGNING_KEY", "KINETIC_LAUNCH_FD")
        }
        env["PYTHONUNBUFFERED"] = "1"
        # The worker's output file is removed with the job: its log is kept in storage too.
        env["KINETIC_LOG_TO_STORAGE"] = "1"
        env["KINETIC_SYS_PATH"] = json.dumps(spec.python_path)
        if spec.target.signing_key:
            env["KINETIC_SIGNING_KEY"] = spec.target.signing_key
        return env

    def _find(self, job_id: str) -> str | None:
        """The Slurm id of the newest job named after ``job_id`` (any state), if Slurm has one."""
        out = cli.run(["squeue", "-h", "-t", "all", f"--name={job_name(job_id)}", "-o", "%i"])
        ids = [line.strip() for line in out.splitlines() if line.strip()]
        return max(ids, key=lambda i: int(i) if i.isdigit() else 0) if ids else None

    # ---- observe ------------------------------------------------------------------------
    def _records(self) -> dict[str, dict[str, Any]]:
        """Slurm's record of every kinetic job it knows, by kinetic job id: one squeue
        (the newest record of a name; a live one wins over an ended one)."""
        out = cli.run(["squeue", "--json"], retry=False)  # the poller rides out a failure
        try:
            data = json.loads(out)
            jobs, errors = data.get("jobs") or [], data.get("errors") or []
        except (ValueError, AttributeError) as exc:
            raise BackendError(f"squeue --json printed something else: {exc}") from exc
        if errors:
            raise _squeue_failed(errors)
        found: dict[str, dict[str, Any]] = {}
        for record in jobs:
            name = str(record.get("name") or "")
            if not name.startswith(NAME_PREFIX):
                continue
            job_id = name[len(NAME_PREFIX) :]
            seen = found.get(job_id)
            if seen is None or _rank(record) > _rank(seen):
                found[job_id] = record
        return found

    def poll(self, job_ids: list[str]) -> dict[str, BackendState]:
        records = self._records()
        return {job_id: self._state(job_id, records.get(job_id)) for job_id in job_ids}

    def _state(self, job_id: str, record: dict[str, Any] | None) -> BackendState:
        folder = self._dir(job_id)
        if not folder.exists():
            return BackendState("not_found")  # never launched here, or deleted
        if record is not None:
            self._missing.pop(job_id, None)
            state = job_state(record)
            if state.phase == "exited" and _state_word(record) in NODE_ENDS:
                return self._stray_stopping(job_id, record) or state
            return state
        if not (folder / SLURM_ID).exists():
            if _locked(folder / LOCK):
                return BackendState(
                    "pending", reason=Reason.SUBMITTING, message="the submitter is running sbatch"
                )
            return BackendState(
                "gone",
                message="its submitter stopped before Slurm took the job; the function never ran",
                ran=False,
            )
        return self._forgotten(job_id)

    def _stray_stopping(self, job_id: str, record: dict[str, Any]) -> BackendState | None:
        """Slurm ended the job for a node failure, but a node of it does not respond: its
        tasks there may run on (a slurmd that died leaves them), and only storage reaches
        them. While they stop themselves (``_stopping_itself``) the job reads running
        (Terminating), so its next attempt never starts beside them."""
        if not self.storage_uri:
            return None
        storage = open_storage(self.storage_uri)
        stopping = _stopping_itself(storage, job_id, read_outcome(storage, job_id))
        if stopping is None:
            return None  # undecided (the resolution decides and seals it), or stopped
        silent = _unresponsive(str(record.get("nodes") or ""))
        if not silent:
            return None  # every node answers: Slurm itself stopped the tasks
        return BackendState(
            "running",
            reason=Reason.TERMINATING,
            message=f"Slurm job {record.get('job_id')} ended for a node failure; node(s) "
            f"{', '.join(silent)} do not respond: {stopping}",
        )

    def _forgotten(self, job_id: str) -> BackendState:
        """Slurm took the job and no longer knows it: its outcome in storage decides; an
        undecided job is given ``lost_grace`` (its node may still run it) before it is gone."""
        slurm_id = (self._dir(job_id) / SLURM_ID).read_text().strip()
        where = (
            f"Slurm no longer knows job {slurm_id} (MinJobAge passed, or slurmctld lost its state)"
        )
        storage = open_storage(self.storage_uri) if self.storage_uri else None
        if storage is None:
            return BackendState("gone", message=where)
        outcome = read_outcome(storage, job_id)
        if outcome is not None:
            self._missing.pop(job_id, None)
            stopping = _stopping_itself(storage, job_id, outcome)
            if stopping is not None:
                return BackendState(
                    "running", reason=Reason.TERMINATING, message=f"{where}; {stopping}"
                )
            return BackendState("gone", message=where)
        first = self._missing.setdefault(job_id, time.time())
        if time.time() - first > self.lost_grace:
            return BackendState(
                "gone", message=f"{where}, for longer than lost_grace={self.lost_grace:g}s"
            )
        started = storage.exists(job_file(job_id, STARTED))
        return BackendState(
            "running" if started else "pending",
            reason=Reason.NODE_UNREACHABLE,
            message=f"{where}; it recorded no outcome: Lost after lost_grace={self.lost_grace:g}s",
        )

    def sleep_until_change(self, job_ids: list[str], timeout: float) -> None:
        time.sleep(timeout)

    # ---- logs ---------------------------------------------------------------------------
    def _log_path(self, job_id: str, worker: int | None) -> Path:
        return self._dir(job_id) / WORKER_LOG.format(worker or 0)

    def logs(self, job_id: str, tail: int | None = None, worker: int | None = None) -> str:
        """The worker's output file while it is there, else its copy in storage."""
        try:
            with open(self._log_path(job_id, worker), "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            if not self.storage_uri:
                return ""
            return log_chunks.read_all(
                open_storage(self.storage_uri), job_id, worker=worker or 0, tail=tail
            )
        text = data.decode("utf-8", "replace")
        if tail is None:
            return text
        lines = text.splitlines()[-tail:] if tail > 0 else []
        return "\n".join(lines) + ("\n" if lines else "")

    def read_logs(
        self, job_id: str, cursor: str | None, worker: int | None = None
    ) -> tuple[str, str | None]:
        """From the output file (cursor ``f:offset``), or storage's copy once the file is
        gone (``s:offset``)."""
        kind, _, at = (cursor or "f:0").partition(":")
        offset = int(at or 0)
        if kind == "f":
            try:
                with open(self._log_path(job_id, worker), "rb") as fh:
                    fh.seek(offset)
                    data = fh.read(LOG_CHUNK)
            except FileNotFoundError:
                if offset:  # the file went while it was followed: nothing more from it
                    return "", cursor
                kind = "s"
            else:
                if len(data) == LOG_CHUNK and b"\n" in data:
                    data = data[: data.rindex(b"\n") + 1]
                return data.decode("utf-8", "replace"), f"f:{offset + len(data)}"
        if not self.storage_uri:
            return "", f"s:{offset}"
        storage = open_storage(self.storage_uri)
        meta = log_chunks.read_meta(storage, job_id, worker or 0)
        chunk, after = log_chunks.read_at(
            storage, job_id, offset, chunk_bytes=log_chunks.chunk_size(meta), worker=worker or 0
        )
        return chunk.decode("utf-8", "replace"), f"s:{after}"

    def log_complete(self, job_id: str, worker: int | None = None) -> bool:
        return not running(self.poll([job_id])[job_id])

    # ---- stop ---------------------------------------------------------------------------
    def cancel(self, job_id: str) -> None:
        """``scancel`` every live job of the name (the whole job, every step), then wait
        (bounded) until Slurm confirms none of its processes is left."""
        ids = self._live_ids(job_id)
        if ids:
            cli.run(["scancel", *ids])
            self._gone(job_id, CANCEL_WAIT)

    def delete(self, job_id: str) -> None:
        """Remove the job's folder (its log stays in storage) once nothing of it runs. A job
        is deleted once decided, and one that ran to its end may still be exiting (its value
        is stored before its batch script returns): it gets ``EXIT_GRACE`` to leave by itself
        before what is left is cancelled, so Slurm's records say COMPLETED, not CANCELLED."""
        if not self._gone(job_id, EXIT_GRACE):
            self.cancel(job_id)
        self._missing.pop(job_id, None)
        shutil.rmtree(self._dir(job_id), ignore_errors=True)

    def _live_ids(self, job_id: str) -> list[str]:
        """Slurm ids of the name's jobs that have, or are about to have, processes."""
        return cli.run(
            ["squeue", "-h", f"--name={job_name(job_id)}", "-t", LIVE, "-o", "%i"]
        ).split()

    def _gone(self, job_id: str, timeout: float) -> bool:
        """Wait (at most ``timeout``) until no job of the name is live; whether none is."""
        try:
            for _ in ticks(interval=0.2, timeout=timeout, describe=lambda: job_name(job_id)):
                if not self._live_ids(job_id):
                    return True
        except WaitTimeout:
            pass
        return False


def _stopping_itself(storage: Storage, job_id: str, outcome: dict[str, Any] | None) -> str | None:
    """Why the job may still have processes Slurm cannot see, or None. Its end was decided
    by anyone but a runner (a cancel, a limit, a sealed Lost): every runner reads that and
    stops itself (``runtime/decided_stop.py``), recording so; until each worker that
    started has recorded its end or its stop, and at most ``SELF_STOP_S`` after the
    decision, its processes may still run."""
    if outcome is None or outcome.get("by") == BY_RUNNER:
        return None
    at = outcome.get("at")
    if not isinstance(at, int | float) or time.time() - at >= SELF_STOP_S:
        return None
    left = workers_left(storage, job_id)
    if not left:
        return None
    return (
        f"worker(s) {', '.join(map(str, left))} may still run: they stop on reading the "
        f"job's decided end (within {SELF_STOP_S:g}s)"
    )


def _squeue_failed(errors: list[Any]) -> BackendError:
    """``squeue --json`` that could not load the jobs: 22.05 exits 0 then, with an empty
    list and an error (``slurm_load_jobs``) when slurmctld does not answer. Read as no
    jobs, every job would look forgotten, and after ``lost_grace`` of an outage, Lost."""
    first = errors[0] if isinstance(errors[0], dict) else {"description": str(errors[0])}
    said = f"{first.get('description') or first.get('error')} ({first.get('source')})"
    if first.get("source") == "slurm_load_jobs":
        return BackendError(
            f"Slurm did not answer squeue: {said}. slurmctld is down, restarting or "
            "overloaded; the job is unaffected: try again.",
            transient=True,
        )
    return BackendError(f"Slurm command squeue failed: {said}")


def _state_word(record: dict[str, Any]) -> str:
    return str(record.get("job_state") or "").split(",")[0].upper()


def _unresponsive(nodes: str) -> list[str]:
    """The nodes of ``nodes`` (a Slurm node list) that slurmctld says do not respond (a
    state ending in ``*``); none when sinfo cannot say."""
    try:
        out = cli.run(["sinfo", "-h", "-N", "-n", nodes, "-o", "%N %t"], retry=False)
    except BackendError:
        return []
    rows = [line.split() for line in out.splitlines() if len(line.split()) == 2]
    return sorted({name for name, state in rows if state.endswith("*")})


def _rank(record: dict[str, Any]) -> tuple[int, int]:
    """Which of two records of one name counts: a live one, then the newest."""
    live = str(record.get("job_state") or "").split(",")[0] not in ENDED
    return (int(live), int(record.get("submit_time") or 0))


def _locked(path: Path) -> bool:
    """Someone holds the launch lock now (a submitter between its claim and sbatch's answer)."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
