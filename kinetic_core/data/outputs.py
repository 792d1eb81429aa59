"""The job's output folder: a real local folder, synced to ``outputs/{job_id}/`` in storage.

Inside a job ``KINETIC_OUTPUT_DIR`` is a local directory (on ``file://`` storage it is the
storage folder itself, so there is nothing to sync) and ``KINETIC_OUTPUT_URI`` its storage
URI. Sync is incremental (a file is sent again only when its size or mtime changed) and
happens on ``sync_outputs()``, when the function ends however it ends, on SIGTERM (cancel,
``life_span``, pod deletion) and, on the local backend, once more by the supervisor after
the runner died (a SIGKILL cannot be caught). A new attempt of an idempotency key starts
with its latest earlier attempt's outputs (``inherit_checkpoint``).

Workers of a multi-host job: each has its own folder and syncs it itself, so four workers
ending at once neither clobber nor lose a file. Worker 0's folder is ``outputs/{job_id}/``
as for a single-host job; worker k's (k > 0) is ``outputs/{job_id}/worker-{k}/``, and so is
the checkpoint it inherits.

A job given an ``output_dir`` keeps all of that under ``{output_dir}/{job_id}/`` instead of
``outputs/{job_id}/`` (a ``Place``): jobs sharing one ``output_dir`` never write each
other's files, and an attempt inherits from the place its predecessor's handle names. Worker 0 inherits its own files only (no ``worker-{k}/``
folder of a multi-host attempt), so it never sends a stale copy of another worker's files.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass
from typing import Any

from kinetic_core.errors import InvalidIdError, StorageError
from kinetic_core.records import layout
from kinetic_core.storage import Storage, open_storage
from kinetic_core.util import signing
from kinetic_core.util.ids import attempt_id, keyed_id, validate_id

__all__ = ["download_outputs", "inherit_checkpoint", "prepare", "sync", "sync_outputs"]

_OUTPUT_ROOT = "KINETIC_OUTPUT_ROOT"  # inside a job: its output_dir ("" for the default place)
_STATE = "synced.json"  # beside the folder, not in it: {relative path: [size, mtime_ns]}
_lock = threading.Lock()
#: (job id, worker) whose output folder this process put in storage itself (file://) and
#: for which it made no local folder: ``finish`` has nothing to sync or remove there, and
#: spares every such job ``tempfile``'s import and probe (~7 ms before its outcome).
_in_place: set[tuple[str, int]] = set()


@dataclass(frozen=True)
class Place:
    """Where one job's outputs are kept: a storage and worker 0's folder in it (worker k's
    is ``{prefix}/worker-{k}``)."""

    storage: Storage
    prefix: str

    def of(self, worker: int = 0) -> str:
        return self.prefix + (f"/{WORKER_FOLDER}{worker}" if worker else "")


def place(storage: Storage, job_id: str, output_dir: str | None = None) -> Place:
    """``outputs/{job_id}`` in the job store ``storage``, or ``{job_id}`` under ``output_dir``."""
    validate_id(job_id)
    if output_dir:
        return Place(open_storage(output_dir), job_id)
    return Place(storage, layout.outputs(job_id))


def place_of(
    storage: Storage, job_id: str, handle: dict[str, Any] | None, signing_key: str | None = None
) -> Place:
    """The place ``handle`` (job ``job_id``'s ``handle.json``) names. Only a record bound to
    this job, and signed when a signing key is in force, is followed; otherwise the default
    place: a forged record never sends a job's files elsewhere."""
    data = dict(handle or {})
    target = data.get("target")
    output_dir = target.get("output_dir") if isinstance(target, dict) else None
    key = signing.key_in_force(signing_key)
    bound = data.get("job_id") == job_id and (
        not key or signing.valid(key, data, data.pop("hmac", None))
    )
    return place(storage, job_id, output_dir if bound and isinstance(output_dir, str) else None)


WORKER_FOLDER = "worker-"
_WORKER_DIR = re.compile(rf"^{WORKER_FOLDER}\d+/")


def local_root(job_id: str, worker: int = 0) -> str:
    """This machine's private folder for the job's outputs (``out/``) and sync state; one
    per worker (ids have no dots: ``{job_id}.worker-{k}`` is no other job's)."""
    import tempfile  # here: most jobs' outputs live in file:// storage itself

    validate_id(job_id)
    _in_place.discard((job_id, worker))  # downloaded data, say: finish removes it
    base = os.path.join(tempfile.gettempdir(), f"kinetic-jobs-{os.getuid()}")
    os.makedirs(base, mode=0o700, exist_ok=True)
    st = os.lstat(base)
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(f"{base} is not private to this user: remove it and retry")
    return os.path.join(base, job_id + (f".{WORKER_FOLDER}{worker}" if worker else ""))


def folder(where: Place, job_id: str, worker: int = 0) -> str:
    """The job's KINETIC_OUTPUT_DIR on this machine."""
    in_place = where.storage.local_path(where.of(worker))
    return in_place or os.path.join(local_root(job_id, worker), "out")


def prepare(
    storage: Storage,
    job_id: str,
    handle: dict[str, Any] | None,
    *,
    worker: int = 0,
    workers: int = 1,
) -> str:
    """Create the output folder, seed it from an earlier attempt, export the env vars.
    ``handle`` is the job's ``handle.json`` as the runner read it (None: unreadable);
    ``worker`` of ``workers``: this process's place in a multi-host job."""
    where = place_of(storage, job_id, handle)
    out = folder(where, job_id, worker)
    if out == where.storage.local_path(where.of(worker)):
        _in_place.add((job_id, worker))
    for path in (os.path.dirname(out), out):  # makedirs' mode covers the leaf only
        os.makedirs(path, mode=0o700, exist_ok=True)
    inherit_checkpoint(storage, job_id, out, handle, worker=worker, own_only=workers > 1)
    os.environ["KINETIC_OUTPUT_DIR"] = out
    os.environ["KINETIC_OUTPUT_URI"] = where.storage.location(where.of(worker))
    os.environ["KINETIC_JOB_STORAGE"] = storage.uri
    os.environ[_OUTPUT_ROOT] = where.storage.uri if where.storage is not storage else ""
    return out


def inherit_checkpoint(
    storage: Storage,
    job_id: str,
    dest: str,
    handle: dict[str, Any] | None,
    *,
    worker: int = 0,
    own_only: bool = False,
) -> str | None:
    """Copy into ``dest`` the outputs of the latest earlier attempt of this job's
    idempotency key that has any; return that attempt's job id (None: nothing to inherit).

    Works however attempt N+1 was created (a resubmit, a batch child retry, a recovery):
    it only needs ``handle`` (the job's ``handle.json``), whose key and attempt must name
    this very job id. Files already in ``dest`` are kept (a restarted runner of the same
    attempt). ``worker``'s own folder is read; with ``own_only`` (worker 0 of a multi-host
    job) other workers' ``worker-{k}/`` folders are left to them.
    """
    if handle is None:
        return None
    key, attempt = handle.get("idempotency_key"), handle.get("attempt")
    if not isinstance(key, str) or not isinstance(attempt, int) or attempt < 2:
        return None
    if keyed_id(key, attempt) != job_id or handle.get("job_id") != job_id:
        return None  # a record not bound to this job: act on nothing
    for n in range(attempt - 1, 0, -1):
        try:
            previous = attempt_id(key, n)
        except InvalidIdError:
            return None  # a record not bound to a job: act on nothing
        record = _read_handle(storage, previous)
        where = place_of(storage, previous, record)
        files = where.storage.walk(where.of(worker))
        if own_only:
            files = [f for f in files if not _WORKER_DIR.match(f)]
        if not files:
            continue
        todo = [f for f in files if not os.path.exists(os.path.join(dest, *f.split("/")))]
        _fetch(where.storage, where.of(worker), todo, dest)
        return previous
    return None


def _read_handle(storage: Storage, job_id: str) -> dict[str, Any] | None:
    try:
        data = json.loads(storage.read_bytes(layout.job_file(job_id, layout.HANDLE)))
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _fetch(storage: Storage, prefix: str, files: list[str], dest: str) -> None:
    from kinetic_core.data.inputs import download

    download(storage, prefix, files, dest)


# ---- sync ------------------------------------------------------------------------------------
def sync(where: Place, job_id: str, out: str | None = None, *, worker: int = 0) -> int:
    """Send what changed in the job's (worker's) output folder since the last sync; delete
    what was removed. Returns the number of files sent. A no-op where the folder is the
    storage."""
    storage = where.storage
    out = out or folder(where, job_id, worker)
    if storage.local_path(where.of(worker)) == out or not os.path.isdir(out):
        return 0
    from kinetic_core.util.parallel import parallel

    state_path = os.path.join(os.path.dirname(out), _STATE)
    try:
        with open(state_path) as fh:
            sent: dict[str, list[int]] = json.load(fh)
    except (OSError, ValueError):
        sent = {}
    now: dict[str, list[int]] = {}
    for base, _, names in os.walk(out):
        rel = os.path.relpath(base, out)
        for name in names:
            path = os.path.join(base, name)
            try:
                st = os.stat(path)
            except OSError:
                continue  # removed while we looked
            key = name if rel == "." else f"{rel}/{name}".replace(os.sep, "/")
            now[key] = [st.st_size, st.st_mtime_ns]
    changed = [k for k, v in now.items() if sent.get(k) != v]
    into = where.of(worker)
    parallel(lambda k: storage.put_file(f"{into}/{k}", os.path.join(out, k)), changed)
    for gone in set(sent) - set(now):
        storage.delete(f"{into}/{gone}")
    tmp = f"{state_path}.tmp"
    with open(tmp, "w") as fh:
        json.dump(now, fh)
    os.replace(tmp, state_path)
    return len(changed)


def sync_outputs() -> int:
    """Inside a job: send the output folder's changes to storage now (e.g. after writing a
    checkpoint). Returns the number of files sent; 0 outside a job."""
    job_id, uri = os.environ.get("KINETIC_JOB_ID"), os.environ.get("KINETIC_JOB_STORAGE")
    if not job_id or not uri:
        return 0
    with _lock:
        where = place(open_storage(uri), job_id, os.environ.get(_OUTPUT_ROOT) or None)
        return sync(where, job_id, os.environ.get("KINETIC_OUTPUT_DIR"), worker=_me())


def _me() -> int:
    """This process's worker index (0 outside a multi-host job)."""
    from kinetic_core.util.workers import Worker

    return Worker.from_env().index


def job_place(storage_uri: str, job_id: str) -> Place:
    """The job's place, from its ``handle.json`` in ``storage_uri``."""
    storage = open_storage(storage_uri)
    return place_of(storage, job_id, _read_handle(storage, job_id))


def sync_if_idle(storage_uri: str, job_id: str, worker: int = 0) -> str | None:
    """The final sync (the function ended, SIGTERM, or the runner died): skipped when a
    sync is under way in this process (a signal interrupted it; the supervisor follows).
    Returns why it failed (None: synced, or skipped); never raises, so it never masks how
    the job ended."""
    if not _lock.acquire(blocking=False):
        return None
    try:
        sync(job_place(storage_uri, job_id), job_id, worker=worker)
        return None
    except Exception as exc:
        import sys

        why = f"{type(exc).__name__}: {exc}"
        print(f"kinetic: could not sync outputs of {job_id}: {why}", file=sys.stderr, flush=True)
        return why
    finally:
        _lock.release()


def finish(storage_uri: str, job_id: str, worker: int = 0, *, keep: bool = False) -> str | None:
    """Last sync as the job (worker) ends, then drop this machine's copy (and downloaded
    data) unless ``keep`` (a failed debug job, held for inspection). A sync that failed
    keeps the copy, the only one of the files, and returns what to tell the user (where
    they are, and why); None otherwise. Never raises: how the job ended must still be
    recorded."""
    if (job_id, worker) in _in_place:
        return None
    try:
        root = local_root(job_id, worker)
        if not os.path.isdir(root):
            return None
        failed = sync_if_idle(storage_uri, job_id, worker)  # no-op where the folder is storage
        if failed is not None:
            return (
                f"the final sync of its outputs failed ({failed}); the files were kept on "
                f"{os.uname().nodename} in {os.path.join(root, 'out')}: copy them from there, "
                "or fix the output_dir's credentials or bucket and run the job again"
            )
        if not keep:
            import shutil

            shutil.rmtree(root, ignore_errors=True)
    except Exception as exc:
        import sys

        print(f"kinetic: could not finish outputs of {job_id}: {exc}", file=sys.stderr, flush=True)
    return None


# ---- the submitter's side --------------------------------------------------------------------
_reachable: set[str] = set()  # output_dirs this process checked: one round trip each


def check_output_dir(output_dir: str) -> None:
    """At submit, as a ``Data`` is checked: the ``output_dir`` can be reached from here,
    so a night's outputs are not found unwritable only at the job's end. ``gs://``: the
    credentials work and the bucket exists (StorageError saying which); ``file://``: the
    folder, or the nearest folder above it that exists, is writable. Nothing is written.
    Write permission on a bucket is not probed (that would write); the job's final sync
    still reports a refusal (its reason ``OutputsNotSynced``)."""
    if output_dir in _reachable:
        return
    storage = open_storage(output_dir)
    root = storage.local_path("")
    if root is not None:
        _check_writable(output_dir, root)
    else:
        try:
            storage.exists(".kinetic-output-dir-probe")  # lists the prefix: credentials, bucket
        except StorageError as exc:
            raise StorageError(
                f"output_dir {output_dir} cannot be reached from here: {exc}"
            ) from None
    _reachable.add(output_dir)


def _check_writable(output_dir: str, root: str) -> None:
    existing = root
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
        raise StorageError(
            f"output_dir {output_dir}: {existing} is not a folder this user can write to, so "
            "the job could not keep its outputs there. Choose another output_dir, or fix the "
            "folder's permissions."
        )


def download_outputs(
    storage: Storage, job_id: str, dest: str, output_dir: str | None = None
) -> str:
    """Copy the job's synced outputs into the local folder ``dest``; return it."""
    where = place(storage, job_id, output_dir)
    _fetch(where.storage, where.prefix, where.storage.walk(where.prefix), dest)
    return dest


def outputs_uri(storage: Storage, job_id: str, output_dir: str | None = None) -> str:
    """The job's outputs folder as a URI with a trailing '/' (a folder for ``Data``)."""
    where = place(storage, job_id, output_dir)
    return where.storage.location(where.prefix) + "/"


def output_dir_of(storage_uri: str, job_id: str, output_dir: str | None = None) -> str:
    """The job's outputs folder: a path on file:// storage, a URI otherwise."""
    if not output_dir:
        return layout.output_dir(storage_uri, job_id)
    where = place(open_storage(output_dir), job_id, output_dir)
    return where.storage.local_path(where.prefix) or where.storage.location(where.prefix)


def delete_outputs(storage: Storage, job_id: str, output_dir: str | None = None) -> None:
    """Delete the job's outputs folder (its own: ``{output_dir}/{job_id}``, never a sibling)."""
    where = place(storage, job_id, output_dir)
    where.storage.delete_prefix(where.prefix)
