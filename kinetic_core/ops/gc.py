"""Storage lifecycle: ``collect_garbage`` removes what nobody needs any more.

**Jobs.** A job goes when its whole attempt chain (the attempts recoveries linked) has
ended, none of them is pinned (``keep=True``), a succeeded one's result was collected
(unless ``include_uncollected``) and the chain ended before the cutoff. A batch child goes
only with its whole batch (every child and driver removable), never on its own. States
come from ``resolve_states``, the one status resolution.

**Order, so a kill at any instant breaks no reader.** Per job: backend objects (the local
backend's ``local_dir`` records, pods), then its outputs, then a tombstone
``jobs/{id}/gc.json``, then ``handle.json`` (from here on ``attach`` and ``list_jobs`` see
no job: they skip a folder without a handle), then every other record, the tombstone last.
Until ``handle.json`` goes the job's records are all there, so it reads as it always did
(its outcome never changes); after, only the tombstone tells the next run to finish.
An idempotency key's index records the highest removed attempt (``removed``) *before*
any handle goes, so a later submit with that key never reuses an attempt id. A batch
gets ``batches/{id}/gc.json`` before its first job goes and loses it last.

**Data, against concurrent submits.** Stored Data (``data/{digest}.json`` and
``data/blobs/``) is removed when no job that is kept refers to it. The protocol:

- submit (``data.hold_lease``): (s1) write a lease ``data/leases/{id}.json`` (digests
  unknown: it protects all data), (s2) list ``data/gc/`` and wait until no run listed
  there may still delete, (s3) upload, skipping what exists, (s4) rewrite the lease
  with its digests, (s5) write ``data/refs/{digest}/{job_id}`` before ``handle.json``,
  then delete the lease.
- gc (here): (g1) write its mark ``data/gc/{run}.json`` with a deadline ``GC_WINDOW``
  ahead, (g2) read every lease, then every ref (a submit deletes its lease only after
  writing its refs, so what the lease read misses the ref read sees), (g3) delete, each delete only before
  ``deadline - CLOCK_SKEW``, (g4) delete its mark.

Interleavings (storage is strongly consistent: a read after a write sees it):

- s1 before g2: gc sees the lease. Undigested (s3 running): gc deletes no data this run.
  Digested: those digests stay. A lease lives ``LEASE_TTL``, far longer than s1..s5,
  and s5's ref then keeps the data as long as the job exists.
- s1 after g2: then g1 < g2 < s1 < s2, so s2 sees the mark and waits until it is gone or
  its deadline has passed (plus the clock skew): every delete of that run is over
  before s3 checks what exists, so s3 re-uploads whatever the run removed.
- A gc killed after g1 leaves its mark: submits wait at most ``GC_WINDOW`` plus twice
  the skew, and never longer than that from when they first saw it (a forged deadline
  cannot stall them).
- A submit killed during s3 leaves an undigested lease: data gc pauses until it expires.
- Refs of a job without ``handle.json`` (s5 done, handle not yet written) count while
  younger than ``LEASE_TTL``; refs of removed jobs are deleted with the data pass.

Jobs submitted by versions without ``data/refs`` (their handle has no ``keep``) whose
call envelope still exists may read data gc cannot see: while one is kept no data is
removed (``GcReport.data_note`` says so).
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from kinetic_core.config.target import Target
from kinetic_core.control.resolution import backend_for, resolve_states
from kinetic_core.data.inputs import CLOCK_SKEW, GC_WINDOW, LEASE_TTL
from kinetic_core.data.outputs import delete_outputs
from kinetic_core.errors import ConfigError, CorruptRecord, JobNotFound, KineticError
from kinetic_core.jobs.handle import BATCH_GROUP_TAG, JobHandle, load_handle
from kinetic_core.jobs.listing import parse_when
from kinetic_core.records import job_index, layout
from kinetic_core.records.lifecycle import read_json
from kinetic_core.states import JobState, JobStatus
from kinetic_core.storage import Storage, open_storage
from kinetic_core.util.ids import ID_PATTERN
from kinetic_core.util.waits import in_thread

__all__ = ["GcReport", "acollect_garbage", "collect_garbage"]

log = logging.getLogger(__name__)

#: The tag of a batch's driver job (``batch/stager.py`` sets it).
BATCH_DRIVER_TAG = "kinetic/batch-driver"


@dataclass
class GcReport:
    """What a run removed (``dry_run``: would remove). ``kept``: reason -> jobs kept for it
    (running, pinned, uncollected, recent, batch, unreadable, backend-error);
    ``data_note``: why no data was removed this run, if so; ``deferred``: deletions left
    for the next run (the run's data window ended)."""

    dry_run: bool
    cutoff: float
    jobs: list[str] = field(default_factory=list)
    batches: list[str] = field(default_factory=list)
    data: list[str] = field(default_factory=list)
    blobs: list[str] = field(default_factory=list)
    bytes: int = 0
    kept: dict[str, int] = field(default_factory=dict)
    data_note: str = ""
    deferred: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cutoff_of(older_than: Any, now: float | None = None) -> float:
    """The epoch time before which things are old: ``older_than`` is seconds (a number or
    a timedelta), a duration ``"30d"``/``"12h"``, or a point in time (datetime, ISO)."""
    now = time.time() if now is None else now
    if isinstance(older_than, timedelta):
        older_than = older_than.total_seconds()
    if isinstance(older_than, int | float) and not isinstance(older_than, bool):
        if not older_than >= 0 or older_than == float("inf"):
            raise ConfigError(f"older_than={older_than!r} must be seconds >= 0 (or '30d').")
        return now - float(older_than)
    if isinstance(older_than, str | datetime):
        return parse_when(older_than, name="older_than", now=now)
    raise ConfigError(f"older_than={older_than!r}: use seconds, '30d', '12h' or a datetime.")


def collect_garbage(
    older_than: Any,
    *,
    dry_run: bool = True,
    include_uncollected: bool = False,
    target: Target | dict[str, Any] | None = None,
) -> GcReport:
    """Remove ended jobs (records, logs, outputs, backend leftovers) and batches older than
    ``older_than``, and the stored Data no kept job refers to; ``dry_run`` (the default)
    only reports. Pinned jobs (``keep=True``) stay, and so do succeeded jobs whose result
    was not collected unless ``include_uncollected``. See docs/storage-lifecycle.md."""
    resolved = Target.coerce(target).resolve()
    storage = open_storage(resolved.storage or "")
    report = GcReport(dry_run=bool(dry_run), cutoff=cutoff_of(older_than))
    scan = _Scan.of(storage, resolved.signing_key)
    plan = _plan(scan, report, include_uncollected)
    report.jobs = sorted(j for chain in plan.values() for j in chain)
    going = set(report.jobs)
    staying = {_batch_of(h) for j, h in scan.handles.items() if j not in going}
    report.batches = sorted(scan.batch_ids() - staying)
    report.batches += sorted(b for b in scan.tombstoned_batches if b not in report.batches)
    removed = report.jobs + scan.leftovers
    report.bytes = sum(_size_under(storage, layout.job_dir(j)) for j in removed)
    if not dry_run:
        _remove_jobs(storage, scan, plan, report)  # a job it could not remove stays in use
    _collect_data(storage, scan, set(report.jobs) | set(scan.leftovers), report)
    return report


acollect_garbage = in_thread(collect_garbage)


# ---- what there is --------------------------------------------------------------------------
@dataclass
class _Scan:
    storage: Storage
    handles: dict[str, JobHandle] = field(default_factory=dict)
    states: dict[str, JobState] = field(default_factory=dict)
    #: Job folders without a handle: a removal to finish (tombstone) or a submit under way.
    leftovers: list[str] = field(default_factory=list)
    unborn: set[str] = field(default_factory=set)
    unreadable: int = 0
    tombstoned_batches: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, storage: Storage, signing_key: str | None) -> _Scan:
        scan = cls(storage)
        for job_id in storage.list_names(layout.JOBS):
            if not ID_PATTERN.fullmatch(job_id):
                continue
            try:
                scan.handles[job_id] = load_handle(storage, job_id, signing_key)
            except CorruptRecord:
                scan.unreadable += 1
            except JobNotFound:
                if storage.exists(layout.job_file(job_id, layout.GC_TOMBSTONE)):
                    scan.leftovers.append(job_id)
                else:
                    scan.unborn.add(job_id)
        ids = list(scan.handles)
        states = resolve_states([scan.handles[i] for i in ids]) if ids else []
        scan.states = dict(zip(ids, states, strict=True))
        with_jobs = scan.batch_ids()
        for group_id in storage.list_names(layout.BATCHES):
            if group_id not in with_jobs and storage.exists(layout.batch_tombstone(group_id)):
                scan.tombstoned_batches.append(group_id)
        return scan

    def batch_ids(self) -> set[str]:
        return {b for h in self.handles.values() if (b := _batch_of(h))}


def _batch_of(handle: JobHandle) -> str | None:
    return handle.tags.get(BATCH_GROUP_TAG) or handle.tags.get(BATCH_DRIVER_TAG) or None


def _chains(handles: dict[str, JobHandle]) -> dict[str, list[str]]:
    """Attempt chains: the attempts recoveries linked (``recovered_from``), by first id."""
    parent = {job_id: job_id for job_id in handles}

    def root(job_id: str) -> str:
        while parent[job_id] != job_id:
            job_id = parent[job_id]
        return job_id

    for job_id, h in handles.items():
        if h.recovered_from in parent:
            parent[root(job_id)] = root(h.recovered_from)
    chains: dict[str, list[str]] = {}
    for job_id in handles:
        chains.setdefault(root(job_id), []).append(job_id)
    return chains


def _keep_reason(scan: _Scan, chain: list[str], cutoff: float, uncollected: bool) -> str | None:
    """Why a chain stays (None: it goes). Any live attempt keeps every attempt."""
    states = [scan.states[j] for j in chain]
    if not all(s.terminal for s in states):
        return "running"
    if any(scan.handles[j].keep for j in chain):
        return "pinned"
    if not uncollected and any(s.status is JobStatus.SUCCEEDED and not s.collected for s in states):
        return "uncollected"
    ended = max(_ended(scan.handles[j], scan.states[j]) for j in chain)
    return "recent" if ended > cutoff else None


def _ended(handle: JobHandle, state: JobState) -> float:
    return state.finished_at.timestamp() if state.finished_at else handle.created_at


def _plan(scan: _Scan, report: GcReport, uncollected: bool) -> dict[str, list[str]]:
    """Chains to remove, by root id; a batch's chains go together or not at all."""
    chains = _chains(scan.handles)
    verdicts = {
        root: _keep_reason(scan, chain, report.cutoff, uncollected)
        for root, chain in chains.items()
    }
    live_batches = {
        _batch_of(scan.handles[j])
        for root, chain in chains.items()
        if verdicts[root] is not None
        for j in chain
    } - {None}
    plan: dict[str, list[str]] = {}
    for root, chain in chains.items():
        reason = verdicts[root]
        if reason is None and any(_batch_of(scan.handles[j]) in live_batches for j in chain):
            reason = "batch"
        if reason is None:
            plan[root] = chain
        else:
            report.kept[reason] = report.kept.get(reason, 0) + len(chain)
    if scan.unreadable:
        report.kept["unreadable"] = scan.unreadable
    return plan


# ---- removing jobs ---------------------------------------------------------------------------
def _remove_jobs(
    storage: Storage, scan: _Scan, plan: dict[str, list[str]], report: GcReport
) -> None:
    for group_id in report.batches:  # first in: a killed run finishes the batch next time
        storage.write_bytes(layout.batch_tombstone(group_id), _stamp(group_id))
    _forget_attempts(storage, [scan.handles[j] for j in report.jobs])
    failed: set[str] = set()
    for chain in plan.values():
        for job_id in chain:
            try:
                _remove_job(storage, scan.handles[job_id])
            except (KineticError, OSError) as exc:
                if not storage.exists(layout.job_file(job_id, layout.HANDLE)):
                    continue  # a concurrent gc run removed it first
                log.warning("kinetic gc: job %s is kept: %s", job_id, exc)
                failed.add(job_id)
    for job_id in scan.leftovers:
        _finish_job(storage, job_id)
    for job_id in failed:
        report.jobs.remove(job_id)
    if failed:
        report.kept["backend-error"] = len(failed)
    for group_id in list(report.batches):
        if any(_batch_of(scan.handles[j]) == group_id for j in failed):
            report.batches.remove(group_id)
            continue
        _remove_batch(storage, group_id, scan.unborn)


def _stamp(owner: str, **extra: Any) -> bytes:
    return json.dumps({"id": owner, "at": time.time(), **extra}).encode()


def _forget_attempts(storage: Storage, handles: list[JobHandle]) -> None:
    """Record per idempotency key the highest attempt removed, before any handle goes."""
    highest: dict[str, tuple[int, set[str]]] = {}
    for h in handles:
        if h.idempotency_key and BATCH_GROUP_TAG not in h.tags:  # (children: the batch's ids)
            n, ids = highest.get(h.idempotency_key, (0, set()))
            highest[h.idempotency_key] = (max(n, h.attempt), ids | {h.job_id})
    for key, (n, ids) in highest.items():
        path = layout.key_index(key)
        try:
            index = json.loads(storage.read_bytes(path))
        except (FileNotFoundError, ValueError):
            index = {}
        if not isinstance(index, dict):
            index = {}
        attempts = [a for a in index.get("attempts") or [] if a not in ids]
        previous = index.get("removed")
        floor = previous if isinstance(previous, int) else 0
        index.update(key=key, attempts=attempts, removed=max(floor, n))
        storage.write_bytes(path, json.dumps(index).encode())


def _remove_job(storage: Storage, handle: JobHandle) -> None:
    """Backend objects, outputs, tombstone, handle, the rest, the tombstone: see above."""
    job_id = handle.job_id
    backend_for(handle).delete(job_id)
    delete_outputs(storage, job_id, handle.target.get("output_dir"))
    # the tombstone keeps the creation time: a run that finishes a job whose handle is gone
    # (this one killed after deleting it) still finds the job's listing index entries
    tombstone = _stamp(job_id, created_at=handle.created_at)
    storage.write_bytes(layout.job_file(job_id, layout.GC_TOMBSTONE), tombstone)
    storage.delete(layout.job_file(job_id, layout.HANDLE))
    _finish_job(storage, job_id)


def _finish_job(storage: Storage, job_id: str) -> None:
    """Everything of a job whose handle is gone, its tombstone last. Its listing index
    entries go after the handle, never before (a reader must not miss a job that exists;
    one that finds an entry whose job is gone drops it anyway)."""
    folder = layout.job_dir(job_id)
    tombstone = read_json(storage, layout.job_file(job_id, layout.GC_TOMBSTONE)) or {}
    if isinstance(tombstone.get("created_at"), int | float):
        job_index.forget(storage, job_id, float(tombstone["created_at"]))
    delete_outputs(storage, job_id)  # the default place (a custom one went before the handle)
    for name in storage.walk(folder):
        if name != layout.GC_TOMBSTONE:
            storage.delete(f"{folder}/{name}")
    storage.delete_prefix(folder)


def _remove_batch(storage: Storage, group_id: str, unborn: set[str]) -> None:
    """The batch's records, its staged children that never launched, its tombstone last."""
    from kinetic_core.batch.manifest import child_job_id

    folder = layout.batch_dir(group_id)
    try:
        total = int(json.loads(storage.read_bytes(layout.manifest(group_id)))["total_expected"])
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        total = 0
    for index in range(total):
        staged = child_job_id(group_id, index, 1)
        if staged in unborn:
            storage.delete_prefix(layout.job_dir(staged))
    for name in storage.walk(folder):
        if name != layout.GC_TOMBSTONE:
            storage.delete(f"{folder}/{name}")
    storage.delete_prefix(folder)


def _size_under(storage: Storage, prefix: str) -> int:
    """Bytes under ``prefix`` where storage is a local disk (0 elsewhere: no sizes listed)."""
    if storage.local_path(prefix) is None:
        return 0
    return sum(_size(storage, f"{prefix}/{name}") for name in storage.walk(prefix))


def _size(storage: Storage, key: str) -> int:
    path = storage.local_path(key)
    try:
        return os.path.getsize(path) if path else 0
    except OSError:
        return 0


# ---- removing data (the protocol in the module docstring) -------------------------------------
@dataclass
class _DataPlan:
    live: set[str] = field(default_factory=set)
    dead_refs: list[str] = field(default_factory=list)
    expired_leases: list[str] = field(default_factory=list)
    note: str = ""


def _collect_data(storage: Storage, scan: _Scan, removed: set[str], report: GcReport) -> None:
    run_id = uuid.uuid4().hex
    deadline = time.time() + GC_WINDOW
    if not report.dry_run:  # g1: before reading any lease or ref
        storage.write_bytes(
            layout.data_gc_mark(run_id), json.dumps({"run": run_id, "deadline": deadline}).encode()
        )
    try:
        plan = _data_plan(storage, scan, removed)
        doomed = _doomed(storage, plan, report)
        if not report.dry_run:
            _delete(storage, doomed, deadline, report)
    finally:
        if not report.dry_run:
            storage.delete(layout.data_gc_mark(run_id))  # g4


def _doomed(storage: Storage, plan: _DataPlan, report: GcReport) -> list[tuple[str, bool]]:
    """What goes, in order, as (key, is a folder): the manifest first (the Data then reads
    as incomplete), its folder, the blobs; then dead refs and expired leases (records, not
    data: they go even in a run that keeps all data)."""
    records = [(key, False) for key in plan.dead_refs + plan.expired_leases]
    if plan.note:
        report.data_note = plan.note
        return records
    present = _digests(storage)
    dead = sorted(present - plan.live)
    live_blobs = {sha for d in present & plan.live for sha in _blobs_of(storage, d)}
    blobs = sorted(set(storage.list_names(layout.DATA_BLOBS)) - live_blobs)
    report.data, report.blobs = dead, blobs
    report.bytes += sum(_size(storage, layout.data_blob(sha)) for sha in blobs)
    doomed = [(layout.data_manifest(d), False) for d in dead]
    doomed += [(layout.data_dir(d), True) for d in dead]
    doomed += [(layout.data_blob(sha), False) for sha in blobs]
    return doomed + records


def _delete(
    storage: Storage, doomed: list[tuple[str, bool]], deadline: float, report: GcReport
) -> None:
    """g3: each delete only while the run's mark still holds submits back."""
    for n, (key, folder) in enumerate(doomed):
        if time.time() >= deadline - CLOCK_SKEW:
            report.deferred = len(doomed) - n
            return
        if folder:
            storage.delete_prefix(key)
        else:
            storage.delete(key)


def _data_plan(storage: Storage, scan: _Scan, removed: set[str]) -> _DataPlan:
    """g2: which Data stay. Leases first, refs second: a submit deletes its lease only once
    its refs are written, so a lease this read misses left refs the next read sees."""
    plan = _DataPlan()
    now = time.time()
    for name in storage.list_names(layout.DATA_LEASES):
        lease = _read(storage, f"{layout.DATA_LEASES}/{name}")
        at = lease.get("at")
        if not isinstance(at, int | float) or at + LEASE_TTL < now:
            plan.expired_leases.append(f"{layout.DATA_LEASES}/{name}")
        elif not isinstance(lease.get("digests"), list):
            plan.note = f"a submit is uploading data (lease {name}): no data is removed this run"
        else:
            plan.live.update(d for d in lease["digests"] if isinstance(d, str))
    kept = set(scan.handles) - removed
    for ref in storage.walk(layout.DATA_REFS):
        digest, _, job_id = ref.partition("/")
        key = f"{layout.DATA_REFS}/{ref}"
        if job_id in kept or (job_id not in removed and _fresh(_read(storage, key), now)):
            plan.live.add(digest)
        else:
            plan.dead_refs.append(key)
    old = next((j for j in sorted(kept) if not plan.note and _older_version(storage, j)), None)
    if old is not None:
        plan.note = (
            f"job {old} was submitted by an older version (no data/refs) and its call is "
            "still stored: no data is removed while it is kept"
        )
    return plan


def _fresh(record: dict[str, Any], now: float) -> bool:
    at = record.get("at")
    return isinstance(at, int | float) and at + LEASE_TTL >= now


def _older_version(storage: Storage, job_id: str) -> bool:
    raw = _read(storage, layout.job_file(job_id, layout.HANDLE))
    return (
        bool(raw) and "keep" not in raw and storage.exists(layout.job_file(job_id, layout.PAYLOAD))
    )


def _read(storage: Storage, key: str) -> dict[str, Any]:
    try:
        data = json.loads(storage.read_bytes(key))
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _digests(storage: Storage) -> set[str]:
    """Every Data under ``data/``: manifests, and (file://) folders left without one."""
    found = set()
    for name in storage.list_names(layout.DATA):
        digest = name.removesuffix(".json")
        if name not in layout.DATA_RESERVED and len(digest) == 64:
            found.add(digest)
    return found


def _blobs_of(storage: Storage, digest: str) -> set[str]:
    files = _read(storage, layout.data_manifest(digest)).get("files")
    return (
        {sha for sha in files.values() if isinstance(sha, str)}
        if isinstance(files, dict)
        else set()
    )
