"""The small JSON records a job leaves in storage: started, finished, stop, collected.

The runner writes started/finished; clients write stop (create-only: the first stop
wins) and collected. ``read_evidence`` gathers them for status resolution.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any

from kinetic_core import layout
from kinetic_core.payload import read_summary
from kinetic_core.storage import Storage


@dataclass
class Evidence:
    """What the runner and the clients wrote to storage about one job."""

    started: dict[str, Any] | None = None
    finished: dict[str, Any] | None = None
    stop: dict[str, Any] | None = None
    collected: dict[str, Any] | None = None


def read_json(storage: Storage, key: str) -> dict[str, Any] | None:
    """A JSON record, or None if it is missing or unreadable (a torn write)."""
    try:
        data = json.loads(storage.read_bytes(key))
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_record(
    storage: Storage, job_id: str, name: str, *, create_only: bool = False, **fields: Any
) -> bool:
    """Write ``jobs/{job_id}/{name}`` stamped with time and host. With ``create_only``,
    False if the record already existed (it is left as it was)."""
    data = {"at": time.time(), "host": os.uname().nodename, "pid": os.getpid(), **fields}
    try:
        storage.write_bytes(
            layout.job_file(job_id, name), json.dumps(data).encode(), create_only=create_only
        )
    except FileExistsError:
        return False
    return True


def read_evidence(storage: Storage, job_id: str) -> Evidence:
    ev = Evidence(
        started=read_json(storage, layout.job_file(job_id, layout.STARTED)),
        finished=read_json(storage, layout.job_file(job_id, layout.FINISHED)),
        stop=read_json(storage, layout.job_file(job_id, layout.STOP)),
        collected=read_json(storage, layout.job_file(job_id, layout.COLLECTED)),
    )
    result = layout.job_file(job_id, layout.RESULT)
    if ev.finished is None and storage.exists(result):
        # The runner stored a result but died before recording "finished".
        try:
            header = read_summary(storage, result)
            ev.finished = {"success": bool(header.get("success")), "phase": None}
        except Exception:
            pass
    return ev


def write_stop(storage: Storage, job_id: str, status: str, reason: str, message: str) -> bool:
    """Record a stop marker once (create-only). False if one already existed."""
    return write_record(
        storage,
        job_id,
        layout.STOP,
        create_only=True,
        status=status,
        reason=reason,
        message=message,
    )
