"""``debug=True``: a failed job's processes (local) or pod (Kubernetes) are kept to inspect.

The runner records the failure as always, so the job reads FAILED at once (the recorded
outcome wins in status resolution, whatever the backend still runs); before that it writes
``jobs/{job_id}/debug.json`` saying how to get in, and puts the same line into the
failure's traceback (``result()`` shows it as a note). Then it holds: it stays alive and
idle, with its working folder, for at most ``DEBUG_HOLD`` seconds (24 h), until SIGTERM or
SIGINT: ``kinetic jobs cleanup ID`` / ``handle.cleanup()`` stop it through the backend. On
Kubernetes the runner is the container's process, so the pod stays Running (the manifest
extends ``activeDeadlineSeconds`` by the hold); on the local backend its supervisor's
deadline is extended the same way. The record names processes and places, never an
environment value. Stdlib only: the runner imports this only when a debug job failed.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any

from kinetic_core.config.target import DEBUG_HOLD, DEBUG_POD_ENV
from kinetic_core.records import layout
from kinetic_core.records.lifecycle import read_json, write_record
from kinetic_core.storage import Storage

__all__ = ["DEBUG_HOLD", "describe", "held", "read"]

DEBUG = "debug.json"  # jobs/{job_id}/debug.json
POD_NAME, POD_NAMESPACE, CONTAINER = DEBUG_POD_ENV


def wanted(handle: dict[str, Any] | None) -> bool:
    """Whether the job (its ``handle.json``) asked for ``debug=True``."""
    target = (handle or {}).get("target")
    return isinstance(target, dict) and target.get("debug") is True


def facts(job_id: str, folder: str | None) -> dict[str, Any]:
    """Where this process is and how to reach it; ``folder``: its KINETIC_OUTPUT_DIR."""
    info: dict[str, Any] = {
        "job_id": job_id,
        "host": os.uname().nodename,
        "runner_pid": os.getpid(),
        "supervisor_pid": os.getppid(),
        "workdir": os.getcwd(),
        "output_folder": folder,
        "held_until": time.time() + DEBUG_HOLD,
    }
    if os.environ.get(POD_NAME):
        info["pod"] = os.environ[POD_NAME]
        info["namespace"] = os.environ.get(POD_NAMESPACE, "default")
        info["container"] = os.environ.get(CONTAINER, "runner")
    return info


def describe(info: dict[str, Any]) -> str:
    """How to get into a held job, in one paragraph a person can paste from."""
    job_id = info.get("job_id")
    until = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(float(info.get("held_until") or 0)))
    if info.get("pod"):
        return (
            f"debug: the pod of job {job_id} is kept Running for inspection until {until}: "
            f"kubectl exec -it -n {info['namespace']} {info['pod']} -c {info['container']} "
            f"-- bash (working directory {info.get('workdir')}); `kinetic jobs cleanup "
            f"{job_id}` deletes it."
        )
    pid = info.get("runner_pid")
    return (
        f"debug: the processes of job {job_id} are kept for inspection until {until}: runner "
        f"pid {pid} (supervisor pid {info.get('supervisor_pid')}) on host {info.get('host')}, "
        f"working directory {info.get('workdir')}, output folder {info.get('output_folder')} "
        f"(e.g. py-spy dump --pid {pid}, gdb -p {pid}); `kinetic jobs cleanup {job_id}` "
        "removes them."
    )


def record(storage: Storage, job_id: str, info: dict[str, Any]) -> None:
    """Write ``debug.json`` (stamped with job id, host and pid by ``write_record``)."""
    write_record(storage, job_id, DEBUG, **{k: v for k, v in info.items() if k != "job_id"})


def read(storage: Storage, job_id: str) -> dict[str, Any] | None:
    """The job's debug record, or None (none, or one naming another job)."""
    data = read_json(storage, layout.job_file(job_id, DEBUG))
    return data if data is not None and data.get("job_id") == job_id else None


def release(storage: Storage, job_id: str) -> None:
    """The hold ended: the record goes, so nobody is told to look for processes that left."""
    try:
        storage.delete(layout.job_file(job_id, DEBUG))
    except Exception as exc:  # a stale record only misleads until its held_until
        print(f"kinetic: could not remove the debug record of {job_id}: {exc}", file=sys.stderr)


def held(storage: Storage, job_id: str) -> dict[str, Any] | None:
    """The debug record of a job held now (its ``held_until`` not passed), or None."""
    info = read(storage, job_id)
    if info is None or float(info.get("held_until") or 0) < time.time():
        return None
    return info


def hold(seconds: float = DEBUG_HOLD) -> None:
    """Stay alive and idle until SIGTERM/SIGINT or ``seconds`` passed. Short sleeps, not one
    long one: a signal taken by another thread of the process still ends the hold."""
    released: list[int] = []

    def release(signum: int, frame: Any) -> None:
        released.append(signum)

    signal.signal(signal.SIGTERM, release)
    signal.signal(signal.SIGINT, release)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    end = time.monotonic() + seconds
    while not released and time.monotonic() < end:
        time.sleep(min(1.0, max(0.0, end - time.monotonic())))
