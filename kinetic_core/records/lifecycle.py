"""The small JSON records a job leaves in storage: started, finished, outcome, collected.

The runner writes started/finished; ``outcome.json`` is created once (create-only) by
whoever decides how the job ends first: the runner (its function returned or raised),
``cancel()``, a deadline, or status resolution sealing what it observed (a job that
died without deciding). Once it exists the job's terminal state never changes.
Clients write collected. ``records.evidence`` gathers them for status resolution.
"""

from __future__ import annotations

import json
import os
import re
import time

from kinetic_core.errors import StorageError
from kinetic_core.records import layout

TYPE_CHECKING = False  # no `typing` at run time: a job's start path (runner.py)
if TYPE_CHECKING:
    from typing import Any

    from kinetic_core.storage import Storage

# The envelope (cloudpickle), the job index and logging are imported where used: a fresh
# runner reads and writes these records before its job starts, and imports nothing else
# first (``bench/runner_start.py``).

# Who decided an outcome. A runner's outcome is final but its process may still be
# exiting; every other decider stops the job, so its outcome is terminal at once.
BY_RUNNER = "runner"


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
    """Write ``jobs/{job_id}/{name}`` stamped with job id, time and host. With
    ``create_only``, False if the record already existed (it is left as it was)."""
    data = {
        "job_id": job_id,
        "at": time.time(),
        "host": os.uname().nodename,
        "pid": os.getpid(),
        **fields,
    }
    try:
        storage.write_bytes(
            layout.job_file(job_id, name), json.dumps(data).encode(), create_only=create_only
        )
    except FileExistsError:
        return False
    return True


def try_write_record(storage: Storage, job_id: str, name: str, **fields: Any) -> bool:
    """``write_record`` for bookkeeping a reader may skip: on read-only storage (or any
    storage failure) it logs and returns False instead of raising."""
    try:
        return write_record(storage, job_id, name, **fields)
    except (StorageError, OSError) as exc:
        import logging

        logging.getLogger(__name__).info(
            "kinetic: could not record %s for job %s (read-only storage?): %s", name, job_id, exc
        )
        return False


def read_outcome(storage: Storage, job_id: str) -> dict[str, Any] | None:
    """The decided outcome, or None. A record naming another job is ignored (copied in)."""
    data = read_json(storage, layout.job_file(job_id, layout.OUTCOME))
    if data is None or data.get("job_id") != job_id or "status" not in data:
        return None
    return data


def decide(
    storage: Storage,
    job_id: str,
    status: str,
    reason: str | None,
    message: str | None,
    *,
    by: str,
    created_at: float | None = None,
    **fields: Any,
) -> tuple[bool, dict[str, Any] | None]:
    """Try to decide how the job ends (create-only). Returns (True, None) when this call
    decided, else (False, the outcome in force). The decider also indexes the end
    (``job_index.note_end``, best effort: a lister repairs a missing one); ``created_at``,
    the handle's, when the caller has it, spares that a read of ``handle.json``."""
    won = write_record(
        storage,
        job_id,
        layout.OUTCOME,
        create_only=True,
        status=status,
        reason=reason,
        message=message,
        by=by,
        **fields,
    )
    if won:
        from kinetic_core.records import job_index

        job_index.note_end(storage, job_id, created_at or None, status)
    return (True, None) if won else (False, read_outcome(storage, job_id))


_WORKER_RECORD = re.compile(r"^(started|finished|self-stopped)(?:-worker-([0-9]+))?\.json$")


def workers_left(storage: Storage, job_id: str) -> list[int]:
    """The workers of the job whose runner started and recorded neither its finish nor
    that it stopped itself on a decided end (``layout.SELF_STOPPED``): those whose
    processes may still run, as far as storage knows. One listing of the job's folder."""
    started: set[int] = set()
    ended: set[int] = set()
    for name in storage.list_names(layout.job_dir(job_id)):
        found = _WORKER_RECORD.match(name)
        if found is None or (found.group(1) == "self-stopped" and found.group(2) is None):
            continue
        worker = int(found.group(2) or 0)
        (started if found.group(1) == "started" else ended).add(worker)
    return sorted(started - ended)
