"""The job index: the newest page of jobs costs a few LISTs, not one read per job.

Every job gets one create-only entry in the UTC hour bucket it was created in,
``index/jobs/{yyyy}/{mmdd}/{hh}/{inv_ms}-{job_id}[.batch={group}].json`` (``layout``),
written BEFORE its ``handle.json`` (``launching.create_attempt``), so every job that
exists has an entry. How a job ended is a second create-only entry beside it,
``{inv_ms}-{job_id}.end={status}.json``, written once its outcome is decided
(``records.decide``). Names carry what listing needs before reading anything: the order
(milliseconds counted down, so the newest sorts first), the job id, its batch, and how it
ended; a LIST of one bucket is the whole page's candidates.

An entry is a hint; the job's own records stay the truth. A reader reads the page's
``handle.json`` files (the signed record), so an entry whose job is missing (a submitter
killed between the two writes, a job removed by gc) or whose handle names another
creation time (a racing creator lost) is dropped, and deleted once it is older than
``GHOST_GRACE``. A missing end entry (killed after the outcome) only means the job is
resolved like a running one, and the reader writes the entry it found missing.

``index/complete.json`` says every job under ``jobs/`` has an entry. Without it listing
scans ``jobs/`` as before, and marks the store once that scan finds every job indexed
(a store only this version wrote: the first listing); ``kinetic jobs reindex``
(``listing.repair_index``) indexes and marks a store written by older versions. Submits
never list ``jobs/``: they cost one write more, whatever the store.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kinetic_core.errors import KineticError
from kinetic_core.records import layout
from kinetic_core.states import JobStatus
from kinetic_core.storage import Storage
from kinetic_core.util.ids import ID_PATTERN

__all__ = [
    "GHOST_GRACE",
    "Entry",
    "batch_group",
    "covers",
    "forget",
    "is_complete",
    "mark_complete",
    "note_created",
    "note_end",
    "walk",
]

log = logging.getLogger(__name__)

#: The tags naming a job's batch: a child's group (``jobs.BATCH_GROUP_TAG``) and a batch
#: driver's (``batch/stager.py``). Spelled here too: this module sits below ``jobs``.
GROUP_TAGS = ("kinetic/group-id", "kinetic/batch-driver")
#: An entry without its job is deleted by readers only past this age (seconds): younger,
#: its submitter may be between the entry and ``handle.json`` right now.
GHOST_GRACE = 600.0
BATCH = "batch="
END = "end="
#: Beside an attempt's entries once a recovery starts its successor: the attempt reads
#: as its successor from then on, so its end entry no longer says its status.
SUPERSEDED = "superseded"
_DIGITS = 13
_STATUSES = frozenset(s.value for s in JobStatus)

# Storage URIs known to be complete (the marker never goes away).
_complete: set[str] = set()
_lock = threading.Lock()


@dataclass
class Entry:
    """One job as the index knows it: order, id, batch, and how it ended once known."""

    job_id: str
    ms: int
    group: str | None = None
    end: str | None = None  # a terminal JobStatus value (``SUCCEEDED``), once decided
    superseded: bool = False  # a recovery started its next attempt
    keys: tuple[str, ...] = ()  # the storage keys of its entries

    @property
    def settled(self) -> bool:
        """Does the index say the job's status for good (ended, never recovered)?"""
        return self.end is not None and not self.superseded

    @property
    def created_at(self) -> float:
        return self.ms / 1000


def batch_group(tags: dict[str, Any]) -> str | None:
    """The batch a job belongs to, as a child or as its driver; None for a user job."""
    for tag in GROUP_TAGS:
        value = tags.get(tag)
        if isinstance(value, str) and ID_PATTERN.fullmatch(value):
            return value
    return None


# ---- writers -----------------------------------------------------------------------------


def note_created(storage: Storage, record: bytes) -> None:
    """Index the job whose ``handle.json`` will be ``record``: call it BEFORE writing the
    handle (a failure here leaves no job, so no job is ever missing from the index)."""
    data = json.loads(record)
    job_id, created_at = data["job_id"], float(data["created_at"])
    previous = data.get("recovered_from")
    if isinstance(previous, str) and ID_PATTERN.fullmatch(previous):
        _note_superseded(storage, previous)  # first: a kill next leaves it resolved
    group = batch_group(data.get("tags") or {})
    suffix = f".{BATCH}{group}" if group else ""
    body = json.dumps({"job_id": job_id, "created_at": created_at, "group": group})
    try:
        storage.write_bytes(
            layout.index_entry(created_at, job_id, suffix), body.encode(), create_only=True
        )
    except FileExistsError:
        pass  # a racing launcher of the same attempt wrote the same entry


def note_end(storage: Storage, job_id: str, created_at: float | None, status: str) -> bool:
    """Record how the job ended (best effort: the outcome record is the truth, and a
    reader repairs a missing entry). ``created_at`` None: read from ``handle.json``."""
    try:
        if created_at is None:
            handle = json.loads(storage.read_bytes(layout.job_file(job_id, layout.HANDLE)))
            created_at = float(handle["created_at"])
        key = layout.index_entry(created_at, job_id, f".{END}{status.lower()}")
        body = json.dumps({"job_id": job_id, "status": status}).encode()
        storage.write_bytes(key, body, create_only=True)
    except FileExistsError:
        return True
    except (KineticError, OSError, ValueError, KeyError, TypeError) as exc:
        log.debug("kinetic: no index end entry for %s (the reader repairs it): %s", job_id, exc)
        return False
    return True


def _note_superseded(storage: Storage, job_id: str) -> None:
    """Mark the attempt a recovery replaces: its status is its successor's from now on.
    An attempt whose handle is gone (removed by gc) is listed no more: nothing to mark."""
    try:
        previous = json.loads(storage.read_bytes(layout.job_file(job_id, layout.HANDLE)))
        key = layout.index_entry(float(previous["created_at"]), job_id, f".{SUPERSEDED}")
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return
    try:
        storage.write_bytes(key, json.dumps({"job_id": job_id}).encode(), create_only=True)
    except FileExistsError:
        pass


def mark_complete(storage: Storage) -> None:
    """Say every job under ``jobs/`` has an entry (best effort: read-only storage keeps
    being scanned)."""
    try:
        storage.write_bytes(
            layout.INDEX_COMPLETE,
            json.dumps({"version": 1, "at": time.time()}).encode(),
            create_only=True,
        )
    except FileExistsError:
        pass
    except (KineticError, OSError) as exc:
        log.info("kinetic: cannot mark the job index complete (read-only storage?): %s", exc)
        return
    with _lock:
        _complete.add(storage.uri)


def is_complete(storage: Storage) -> bool:
    """Can listing trust the index (every job has an entry)? One request, then cached."""
    if storage.uri in _complete:
        return True
    if storage.exists(layout.INDEX_COMPLETE):
        with _lock:
            _complete.add(storage.uri)
        return True
    return False


def covers(storage: Storage, jobs: list[tuple[str, float]]) -> bool:
    """Has every ``(job_id, created_at)`` its entry? (The whole index walked once: what a
    scan of a store without the marker checks before marking it.)"""
    indexed = {(e.ms, e.job_id) for bucket in walk(storage) for e in bucket}
    return all((int(created_at * 1000), job_id) in indexed for job_id, created_at in jobs)


def forget(storage: Storage, job_id: str, created_at: float) -> None:
    """Drop a job's entries now (gc, after deleting the job; readers drop them anyway).
    One LIST of the job's bucket, one delete per entry."""
    for entry in _read_bucket(storage, layout.index_bucket(created_at)):
        if entry.job_id == job_id:
            for key in entry.keys:
                storage.delete(key)


def forget_created(storage: Storage, record: bytes) -> None:
    """Undo ``note_created`` for a launch that failed and deleted its job (after the job's
    folder is gone: a reader must never miss a job that exists)."""
    data = json.loads(record)
    forget(storage, data["job_id"], float(data["created_at"]))


def drop(storage: Storage, entry: Entry, *, stale: bool, now: float | None = None) -> None:
    """A reader found no job for ``entry``: delete it if it is ``stale`` (the job's handle
    names another creation time) or older than ``GHOST_GRACE`` (best effort)."""
    now = time.time() if now is None else now
    if not stale and now - entry.created_at < GHOST_GRACE:
        return
    try:
        for key in entry.keys:
            storage.delete(key)
    except (KineticError, OSError) as exc:
        log.debug("kinetic: could not delete index entry of %s: %s", entry.job_id, exc)


# ---- reader ------------------------------------------------------------------------------


def _parse(name: str) -> tuple[int, str, str | None, str | None, bool] | None:
    """(ms, job id, group, end status, superseded) of an entry name; None otherwise."""
    if not name.endswith(".json"):
        return None
    head, *parts = name[: -len(".json")].split(".")
    inverted, _, job_id = head.partition("-")
    if len(inverted) != _DIGITS or not inverted.isdigit() or not ID_PATTERN.fullmatch(job_id):
        return None
    group = end = None
    superseded = False
    for part in parts:
        if part == SUPERSEDED:
            superseded = True
        elif part.startswith(BATCH) and ID_PATTERN.fullmatch(part[len(BATCH) :]):
            group = part[len(BATCH) :]
        elif part.startswith(END) and part[len(END) :].upper() in _STATUSES:
            end = part[len(END) :].upper()
        else:
            return None
    return layout.INDEX_MS_MAX - int(inverted), job_id, group, end, superseded


def _read_bucket(storage: Storage, bucket: str) -> list[Entry]:
    """One LIST: the bucket's jobs, their entries merged (open and end)."""
    found: dict[tuple[int, str], Entry] = {}
    for name in storage.list_names(bucket):
        parsed = _parse(name)
        if parsed is None:
            continue
        ms, job_id, group, end, superseded = parsed
        entry = found.setdefault((ms, job_id), Entry(job_id, ms))
        entry.group = entry.group or group
        entry.end = entry.end or end
        entry.superseded = entry.superseded or superseded
        entry.keys += (f"{bucket}/{name}",)
    return list(found.values())


def _span(parts: list[int]) -> tuple[float, float]:
    """[start, end) in epoch seconds of a year, a day or an hour bucket."""
    import calendar  # here: a job's runner writes the index and never reads it

    if len(parts) == 1:
        return calendar.timegm((parts[0], 1, 1, 0, 0, 0)), calendar.timegm(
            (parts[0] + 1, 1, 1, 0, 0, 0)
        )
    year, mmdd = parts[0], parts[1]
    start = calendar.timegm((year, mmdd // 100, mmdd % 100, 0, 0, 0))
    if len(parts) == 2:
        return start, start + 86400
    return start + 3600 * parts[2], start + 3600 * (parts[2] + 1)


def walk(
    storage: Storage,
    *,
    since: float | None = None,
    until: float | None = None,
    newest_first: bool = True,
) -> Iterator[list[Entry]]:
    """The index bucket by bucket (hours), each bucket's entries in order: newest first
    (or oldest first). Buckets outside [since, until] are never listed. Costs one LIST per
    year, day and hour visited; a caller that stops early lists nothing more."""

    def inside(parts: list[int]) -> bool:
        start, end = _span(parts)
        return (since is None or end > since) and (until is None or start <= until)

    def children(prefix: str, parts: list[int], width: int) -> list[tuple[str, list[int]]]:
        names = [n for n in storage.list_names(prefix) if len(n) == width and n.isdigit()]
        names.sort(reverse=newest_first)
        out = [(f"{prefix}/{n}", [*parts, int(n)]) for n in names]
        return [(p, ps) for p, ps in out if _valid(ps) and inside(ps)]

    for year, ys in children(layout.INDEX_JOBS, [], 4):
        for day, ds in children(year, ys, 4):
            for hour, _ in children(day, ds, 2):
                entries = [
                    e
                    for e in _read_bucket(storage, hour)
                    if (since is None or e.created_at >= since - 0.001)
                    and (until is None or e.created_at <= until)
                ]
                entries.sort(key=lambda e: (e.ms, e.job_id), reverse=newest_first)
                if entries:
                    yield entries


def _valid(parts: list[int]) -> bool:
    if len(parts) >= 2 and not (1 <= parts[1] // 100 <= 12 and 1 <= parts[1] % 100 <= 31):
        return False
    return len(parts) < 3 or 0 <= parts[2] <= 23
