"""``Data``: files a job needs, uploaded once (content-addressed) and arriving as a local path.

At submit every ``Data`` in the call's arguments (nested in lists, tuples, dicts, sets,
dataclasses) and in ``volumes`` is checked and hashed first (bad input fails before anything
is written), then uploaded to ``data/{digest}/`` in parallel, each object create-only, the
manifest last: a killed upload leaves no data that reads as complete, and an unchanged
resubmit uploads nothing. The payload carries a ``DataRef`` instead; the runner turns it
back into a ``str`` path (``materialize``), so the function never sees ``Data``.

``kinetic gc`` removes stored data that no job references. Before a submit relies on
anything already stored it holds a lease (``data/leases/``) and waits out any gc run that
may be deleting data; every job records what it reads (``data/refs/``) before its handle
exists. Why that is enough against a concurrent gc: ``kinetic_core/ops/gc.py``.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import errno
import hashlib
import json
import logging
import os
import posixpath
import stat
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kinetic_core.errors import ConfigError, SubmissionError
from kinetic_core.records import layout
from kinetic_core.util.parallel import CORES, WORKERS, parallel

__all__ = [
    "Data",
    "DataRef",
    "check_volumes",
    "find_data",
    "fuse_volumes",
    "materialize",
    "prepare",
    "reference_data",
    "stored_digests",
    "transform",
]

log = logging.getLogger(__name__)

#: Copies into a local storage root: past about 8 threads the kernel's page cache for the
#: one target filesystem is the bottleneck, and more threads only contend (measured on 16
#: cores: 1 GiB in 1,000 files stored in 0.51 s with 8 threads, 0.55-0.65 s with 16).
LOCAL_COPIERS = 8


def _workers(storage: Any) -> int:
    return min(CORES, LOCAL_COPIERS) if storage.local_path("") else WORKERS


_CHUNK = 1 << 20


@dataclass(frozen=True)
class Data:
    """A local file or folder (relative or absolute), a ``file://`` URI, or a ``gs://`` URI
    (trailing ``/``: every object under that prefix) that the job reads as a local path.

    ``fuse=True``: on GKE a ``gs://`` volume is mounted through GCS FUSE instead of being
    downloaded; elsewhere it is downloaded (with a logged note).
    """

    path: str
    fuse: bool = dataclasses.field(default=False, kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.path, str | os.PathLike) or not os.fspath(self.path):
            raise ConfigError(f"Data(path) needs a non-empty path or URI, got {self.path!r}.")
        object.__setattr__(self, "path", os.fspath(self.path))
        scheme, sep, _ = self.path.partition("://")
        if sep and scheme not in ("file", "gs") and scheme.isidentifier():
            raise ConfigError(
                f"Data({self.path!r}): {scheme}:// is not supported; Data takes a local path, "
                "file:///absolute/path or gs://bucket/path. Download it first (for the "
                "Hugging Face Hub: huggingface_hub.snapshot_download) and pass the local path, "
                "or copy it to a gs:// bucket."
            )

    @property
    def remote(self) -> bool:
        return self.path.startswith("gs://")

    @property
    def is_gcs(self) -> bool:
        """A ``gs://`` URI (the job downloads it, or mounts it with ``fuse=True``)."""
        return self.remote

    @property
    def is_local(self) -> bool:
        """A local path or ``file://`` URI (uploaded to storage at submit)."""
        return not self.remote

    @property
    def is_dir(self) -> bool:
        """Whether the job receives a folder. Local: the path is a folder now (False when
        it does not exist). ``gs://``: a trailing ``/`` or a bucket root, without I/O;
        otherwise what the bucket holds decides, as at submit (objects under the name: a
        folder; the object itself, or nothing there: not one)."""
        if not self.remote:
            return os.path.isdir(self.local_path)
        name = self.path[len("gs://") :].partition("/")[2]
        if not name or name.endswith("/"):
            return True
        try:
            return _check_remote(self)
        except SubmissionError:
            return False

    @property
    def local_path(self) -> str:
        """The local path (``file://`` stripped, made absolute)."""
        path = self.path[len("file://") :] if self.path.startswith("file://") else self.path
        return os.path.abspath(os.path.expanduser(path))

    def content_hash(self) -> str:
        """sha256 hex over the relative paths and contents ("file:"/"dir:" prefixed), the
        same on every machine; symlinks count as what they point at. A ``gs://`` Data has
        no local content: its hash is over its URI."""
        if self.remote:
            return hashlib.sha256(f"uri:{self.path}".encode()).hexdigest()
        return _scan(self).digest()


@dataclass(frozen=True)
class DataRef:
    """What the payload carries in place of a ``Data``: where its bytes are."""

    source: str  # "stored": data/{digest} in the job's storage; else the gs:// URI
    digest: str
    name: str  # the file's name ("" for a folder)
    is_dir: bool
    fuse: bool = False


# ---- scanning and hashing (submit side) ------------------------------------------------------
@dataclass
class _Tree:
    data: Data
    is_dir: bool
    files: list[tuple[str, str]]  # (relative /-path, absolute path)
    hashes: list[str] = dataclasses.field(default_factory=list)

    def digest(self, then: Callable[[str, str], None] | None = None, workers: int = 0) -> str:
        """The tree's content hash. ``then(sha, path)`` runs for each file as soon as it is
        hashed (the upload), so hashing one file overlaps copying another."""
        if not self.hashes or then is not None:
            hashes = [""] * len(self.files)

            def one(index: int) -> None:
                path = self.files[index][1]
                hashes[index] = _file_hash(self.data, path)
                if then is not None:
                    then(hashes[index], path)

            parallel(one, range(len(self.files)), workers or CORES)
            self.hashes = hashes
        h = hashlib.sha256(b"dir:" if self.is_dir else b"file:")
        for (rel, _), digest in zip(self.files, self.hashes, strict=True):
            h.update(f"{rel}\0{digest}\n".encode())
        return h.hexdigest()


def _bad(data: Data, problem: str, todo: str) -> SubmissionError:
    return SubmissionError(f"Data({data.path!r}): {problem}. {todo}")


def _stat(data: Data, path: str) -> os.stat_result:
    try:
        return os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise _bad(data, f"{path} is a broken symlink", "Fix or remove the link.") from None
        raise _bad(
            data,
            f"{path} does not exist",
            f"Check the path (a relative path is resolved against {os.getcwd()}).",
        ) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _bad(data, f"{path} is a symlink loop", "Fix the symlinks.") from None
        raise _bad(data, f"cannot read {path} ({exc.strerror})", "Fix its permissions.") from None


def _scan(data: Data) -> _Tree:
    root = data.local_path
    st = _stat(data, root)
    if stat.S_ISREG(st.st_mode):
        _readable(data, root)
        return _Tree(data, False, [(os.path.basename(root), root)])
    if not stat.S_ISDIR(st.st_mode):
        raise _bad(data, f"{root} is neither a file nor a folder", "Pass a file or a folder.")
    files: list[tuple[str, str]] = []
    _walk(data, root, "", frozenset(), files)
    return _Tree(data, True, files)


def _walk(data: Data, folder: str, rel: str, ancestors: frozenset[str], out: list[Any]) -> None:
    real = os.path.realpath(folder)
    if real in ancestors:
        raise _bad(data, f"{folder} is a symlink loop (back to {real})", "Fix the symlinks.")
    try:
        names = sorted(os.listdir(folder))
    except OSError as exc:
        raise _bad(data, f"cannot list {folder} ({exc.strerror})", "Fix its permissions.") from None
    for name in names:
        path = os.path.join(folder, name)
        st = _stat(data, path)
        if stat.S_ISDIR(st.st_mode):
            _walk(data, path, f"{rel}{name}/", ancestors | {real}, out)
        elif stat.S_ISREG(st.st_mode):
            _readable(data, path)
            out.append((f"{rel}{name}", path))


def _readable(data: Data, path: str) -> None:
    if not os.access(path, os.R_OK):
        raise _bad(data, f"{path} is not readable", "Fix its permissions (chmod u+r).")


#: sha256 of files this process hashed, by identity (device, inode, size, times): a second
#: submit of unchanged data reads nothing.
_hashed: dict[tuple[int, ...], str] = {}


#: One read buffer per hashing thread, reused for every file: a fresh buffer per read
#: costs page faults, and many threads faulting at once serialize on the kernel's lock
#: for this process's memory (measured: 16 threads hashed 1 GiB in 0.5 s, not 0.1 s).
_buffers = threading.local()


def _file_hash(data: Data, path: str) -> str:
    h = hashlib.sha256()
    buf = getattr(_buffers, "buf", None)
    if buf is None:
        buf = _buffers.buf = memoryview(bytearray(_CHUNK))
    try:
        with open(path, "rb", buffering=0) as fh:
            st = os.fstat(fh.fileno())
            identity = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            if identity in _hashed:
                return _hashed[identity]
            while n := fh.readinto(buf):
                h.update(buf[:n])
    except OSError as exc:
        raise _bad(data, f"cannot read {path} ({exc.strerror})", "Fix its permissions.") from None
    _hashed[identity] = h.hexdigest()
    return _hashed[identity]


def _check_remote(data: Data) -> bool:
    """Whether the gs:// Data is a folder (a trailing '/', or no object of that name but
    objects under it: a job's ``output_dir``); SubmissionError when nothing is there."""
    from kinetic_core.storage import open_storage

    bucket, _, name = data.path[len("gs://") :].partition("/")
    storage = open_storage(f"gs://{bucket}")
    if data.path.endswith("/") or not name:
        if not storage.walk(name.rstrip("/")) and not _job_outputs(storage, name):
            raise _bad(data, "no object exists under that prefix", "Check the URI.")
        return True
    if storage.exists(name):
        return False
    if storage.walk(name) or _job_outputs(storage, name):
        return True
    raise _bad(
        data,
        "the object does not exist",
        "Check the URI (end it with '/' for every object under a prefix).",
    )


def _job_outputs(bucket: Any, name: str) -> bool:
    """Whether ``name`` is the output folder of a kinetic job in ``bucket``. A job that
    wrote nothing has no object there (GCS has no empty folders); its outputs are then an
    empty folder, as they are on file:// storage."""
    owner = layout.outputs_owner(name)
    if owner is None:
        return False
    root, job_id = owner
    return bool(
        bucket.exists("/".join(filter(None, [root, layout.job_file(job_id, layout.HANDLE)])))
    )


# ---- walking arguments -----------------------------------------------------------------------
def transform(value: Any, fn: Callable[[Any], Any], kind: type) -> Any:
    """``value`` with every instance of ``kind`` replaced by ``fn(it)``, looking inside
    lists, tuples (named too), dicts, sets and dataclass instances; unchanged parts keep
    their identity."""
    if isinstance(value, kind):
        return fn(value)
    if isinstance(value, list):
        items = [transform(v, fn, kind) for v in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    if isinstance(value, tuple):
        items = [transform(v, fn, kind) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(value, dict):
        pairs = {k: transform(v, fn, kind) for k, v in value.items()}
        if all(pairs[k] is v for k, v in value.items()):
            return value
        clone = copy.copy(value)
        clone.update(pairs)
        return clone
    if isinstance(value, set | frozenset):
        items = [transform(v, fn, kind) for v in value]
        return type(value)(items) if any(i not in value for i in items) else value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changed = {}
        for f in dataclasses.fields(value):
            old = getattr(value, f.name, None)
            new = transform(old, fn, kind)
            if new is not old:
                changed[f.name] = new
        if not changed:
            return value
        copied: Any = copy.copy(value)
        for name, new in changed.items():
            object.__setattr__(copied, name, new)
        return copied
    return value


def _collect(value: Any) -> list[Data]:
    found: list[Data] = []

    def keep(data: Data) -> Data:
        found.append(data)
        return data

    transform(value, keep, Data)
    return found


def find_data(value: Any) -> list[Data]:
    """Every ``Data`` in ``value`` (a call's arguments, nested as ``submit`` looks for them),
    each once, in order: what a job reads, e.g. the inputs a provider reports as lineage."""
    return list(dict.fromkeys(_collect(value)))


# ---- submit ----------------------------------------------------------------------------------
def check_volumes(volumes: Any, *, backend: str, supports_volumes: bool) -> dict[str, Data]:
    """``volumes`` normalized: absolute, distinct, not nested in one another, each a Data.
    ``supports_volumes``: what ``backend``'s kind says (the caller asks it)."""
    if not volumes:
        return {}
    if not isinstance(volumes, dict):
        raise ConfigError(f"volumes must be a dict {{'/abs/path': Data(...)}}, got {volumes!r}.")
    if not supports_volumes:
        raise ConfigError(
            f"The {backend} backend cannot honour a mount path (volumes=...): its jobs see "
            "no mounts. Pass the Data as an argument instead; it arrives as a path."
        )
    normalized: dict[str, Data] = {}
    for path, data in volumes.items():
        if not isinstance(path, str) or not posixpath.isabs(path):
            raise ConfigError(f"Mount path {path!r} must be absolute (e.g. '/data/train').")
        if not isinstance(data, Data):
            raise ConfigError(f"volumes[{path!r}] must be a kinetic_core.Data, got {data!r}.")
        norm = posixpath.normpath(path)
        if norm == "/":
            raise ConfigError("Mount path '/' would hide the job's filesystem: pick a folder.")
        for other in normalized:
            if norm == other or norm.startswith(other + "/") or other.startswith(norm + "/"):
                raise ConfigError(
                    f"Mount paths {path!r} and {other!r} collide: give each Data its own folder."
                )
        normalized[norm] = data
    return normalized


def prepare(call: dict[str, Any], volumes: dict[str, Data], storage: Any) -> dict[str, Any]:
    """The call with every Data replaced by a DataRef, its bytes uploaded. Everything is
    checked and hashed before the first byte is written."""
    found = _collect((call["args"], call["kwargs"])) + list(volumes.values())
    if not found:
        return call
    remote = {d: _plan_remote(d) for d in found if d.remote}
    trees = {d: _scan(d) for d in found if not d.remote}  # every check before any write
    lease = hold_lease(storage) if trees else ""
    try:
        refs = {**remote, **{d: _upload(storage, tree) for d, tree in trees.items()}}
    except BaseException:
        if lease:  # nothing relies on it: do not hold gc back for a day
            storage.delete(layout.data_lease(lease))
        raise
    if lease:  # from here on the lease protects these Data only, not every upload
        _write_lease(
            storage, lease, sorted({r.digest for r in refs.values() if r.source == "stored"})
        )

    def ref(data: Data) -> DataRef:
        return refs[data]

    return {
        **call,
        "args": transform(call["args"], ref, Data),
        "kwargs": transform(call["kwargs"], ref, Data),
        "volumes": {path: ref(d) for path, d in volumes.items()},
        "has_data": True,
        "data_lease": lease,
    }


# ---- the submit's half of the gc protocol (the other half and the proof: gc.py) ---------
#: A lease protects what a submit relies on for this long (a submit takes seconds; the
#: job's ``data/refs/`` record takes over before its handle exists).
LEASE_TTL = 24 * 3600.0
#: A gc run deletes data for at most this long after writing its mark (data/gc/).
GC_WINDOW = 120.0
#: Bound on the clock difference between machines, and on one delete's duration.
CLOCK_SKEW = 30.0


def _write_lease(storage: Any, lease_id: str, digests: list[str] | None) -> None:
    body = {"lease": lease_id, "at": time.time(), "digests": digests}
    storage.write_bytes(layout.data_lease(lease_id), json.dumps(body).encode())


def hold_lease(storage: Any) -> str:
    """Write a lease that protects every stored Data (the digests are not known before the
    upload hashes them), then wait until no gc run that may have missed it can still
    delete: write first, read second, as gc does the other way round. Returns its id."""
    from kinetic_core.util.waits import ticks  # the runner imports this module: keep it light

    lease_id = uuid.uuid4().hex
    _write_lease(storage, lease_id, None)
    # Only the runs marked now may have missed the lease: a later one reads it (gc.py).
    marks = gc_marks(storage)
    first_seen: dict[str, float] = {}

    def deleting() -> list[str]:
        now, current = time.time(), gc_marks(storage) if marks else {}
        return [m for m in marks if m in current and _may_delete(m, marks[m], now, first_seen)]

    for _ in ticks(
        interval=1.0, timeout=None, describe=lambda: f"gc runs {deleting()} to stop deleting"
    ):
        if not deleting():
            break
    return lease_id


def _may_delete(mark: str, deadline: float, now: float, first_seen: dict[str, float]) -> bool:
    """Whether the gc run of ``mark`` may still delete: before its deadline (plus the clock
    skew), and never longer than a run's window from when this process first saw it (a
    mark with a forged deadline cannot stall submits)."""
    seen = first_seen.setdefault(mark, now)
    return now < min(deadline, seen + GC_WINDOW) + CLOCK_SKEW


def gc_marks(storage: Any) -> dict[str, float]:
    """Run id -> deadline of every gc mark (an unreadable one reads as already expired)."""
    marks: dict[str, float] = {}
    for name in storage.list_names(layout.DATA_GC):
        run_id = name.removesuffix(".json")
        try:
            deadline = json.loads(storage.read_bytes(layout.data_gc_mark(run_id)))["deadline"]
            marks[run_id] = float(deadline)
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            continue
    return marks


def stored_digests(call: dict[str, Any]) -> list[str]:
    """The digests of the stored Data (``data/{digest}``) a prepared call reads."""
    found: list[str] = []

    def keep(ref: DataRef) -> DataRef:
        if ref.source == "stored":
            found.append(ref.digest)
        return ref

    transform((call.get("args"), call.get("kwargs"), call.get("volumes")), keep, DataRef)
    return sorted(set(found))


def reference_data(storage: Any, call: dict[str, Any], job_id: str) -> None:
    """Record that job ``job_id`` reads each stored Data of ``call`` (before its handle is
    written: gc keeps data while a job that exists, or may be being created, refers to it),
    then release the submit's lease."""
    body = json.dumps({"job_id": job_id, "at": time.time()}).encode()
    for digest in stored_digests(call) if call.get("has_data") else []:
        storage.write_bytes(layout.data_ref(digest, job_id), body)
    if call.get("data_lease"):  # the refs protect the data from here on
        storage.delete(layout.data_lease(call["data_lease"]))


def fuse_volumes(call: dict[str, Any]) -> dict[str, str]:
    """Mount path -> gs:// URI of the call's volumes that asked for GCS FUSE."""
    volumes = call.get("volumes") or {}
    return {p: r.source for p, r in volumes.items() if r.fuse and r.source.startswith("gs://")}


def _plan_remote(data: Data) -> DataRef:
    is_dir = _check_remote(data)
    return DataRef(data.path, data.content_hash(), "", is_dir, data.fuse)


def _upload(storage: Any, tree: _Tree) -> DataRef:
    """Each file is stored once as ``data/blobs/{sha256}`` (create-only, right after it is
    hashed, in parallel); then, on a local disk, ``data/{digest}/`` is laid out as hard
    links to the blobs (the job reads it in place); the manifest is written last: it marks
    the data complete."""

    def put(sha: str, source: str) -> None:
        key = layout.data_blob(sha)
        if storage.exists(key):
            return  # stored before: nothing to send
        try:
            storage.put_file(key, source, create_only=True)
        except FileExistsError:
            pass  # a concurrent submit stored this very content
        local = storage.local_path(key)
        if local:
            os.chmod(local, 0o400)  # jobs read it in place: make a write fail loudly

    digest = tree.digest(then=put, workers=_workers(storage))
    name = "" if tree.is_dir else tree.files[0][0]
    ref = DataRef("stored", digest, name, tree.is_dir, tree.data.fuse)
    manifest = layout.data_manifest(digest)
    if storage.exists(manifest):
        return ref
    files = {rel: sha for (rel, _), sha in zip(tree.files, tree.hashes, strict=True)}
    folder = storage.local_path(layout.data_dir(digest))
    if folder:
        os.makedirs(folder, mode=0o700, exist_ok=True)  # also for an empty folder
        for rel, sha in files.items():
            target = os.path.join(folder, *rel.split("/"))
            os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
            with contextlib.suppress(FileExistsError):  # an interrupted earlier layout
                os.link(storage.local_path(layout.data_blob(sha)), target)
    body = {"is_dir": tree.is_dir, "files": files}
    with contextlib.suppress(FileExistsError):
        storage.write_bytes(manifest, json.dumps(body).encode(), create_only=True)
    return ref


# ---- in the job ------------------------------------------------------------------------------
def _safe(rel: str) -> str:
    """A relative /-path from storage, refused if it could escape its folder."""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise SubmissionError(f"Refusing the stored data path {rel!r}: it is not a plain path.")
    return rel


def materialize(ref: DataRef, storage: Any, scratch: str, dest: str | None = None) -> str:
    """A local path holding ``ref``'s content: read in place on a local disk, else
    downloaded (in parallel) into ``dest`` or under ``scratch``. A file arrives under its
    own name inside ``dest``."""
    _sha(ref.digest)
    if ref.name:
        _safe(ref.name)
    if ref.source == "stored":
        local = storage.local_path(layout.data_dir(ref.digest))
        if local and dest is None:
            return os.path.join(local, ref.name) if ref.name else local
        manifest = json.loads(storage.read_bytes(layout.data_manifest(ref.digest)))
        root = dest or os.path.join(scratch, ref.digest)
        blobs = {_safe(rel): _sha(sha) for rel, sha in manifest["files"].items()}
        download_blobs(storage, blobs, root)
        return root if ref.is_dir else os.path.join(root, ref.name)
    else:
        from kinetic_core.storage import open_storage

        if ref.fuse:
            log.warning(
                "kinetic: %s is downloaded (GCS FUSE mounts only on GKE volumes)", ref.source
            )
        bucket, _, name = ref.source[len("gs://") :].partition("/")
        source = open_storage(f"gs://{bucket}")
        if ref.is_dir:
            prefix = name.rstrip("/")
            files = source.walk(prefix)
        else:
            prefix, leaf = posixpath.split(name)
            files = [leaf]
    files = [_safe(f) for f in files]
    root = dest or os.path.join(scratch, ref.digest)
    download(source, prefix, files, root)
    if ref.is_dir:
        return root
    return os.path.join(root, files[0])


def _sha(value: str) -> str:
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise SubmissionError(f"Refusing a stored data reference {value!r}: not a sha256.")
    return value


def download_blobs(storage: Any, blobs: dict[str, str], root: str) -> None:
    """Fetch ``{relative path: sha256}`` from ``data/blobs/`` into ``root``, in parallel."""

    def get(item: tuple[str, str]) -> None:
        target = os.path.join(root, *item[0].split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        storage.get_file(layout.data_blob(item[1]), target)

    os.makedirs(root, exist_ok=True)
    parallel(get, blobs.items(), _workers(storage))


def download(storage: Any, prefix: str, files: list[str], root: str) -> None:
    def get(rel: str) -> None:
        target = os.path.join(root, *rel.split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        storage.get_file(f"{prefix}/{rel}" if prefix else rel, target)

    os.makedirs(root, exist_ok=True)
    parallel(get, files, _workers(storage))
