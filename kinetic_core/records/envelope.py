"""Call and result envelopes: a cloudpickle body followed by a verifiable header.

Layout: ``body | header-json | u64 header length | MAGIC``. The header sits at the end so
the body can be streamed straight to storage (a 1 GiB argument is never held twice in
memory). The header lists a digest per chunk of the body (``chunks``: sha256 in format
2, BLAKE3 in format 3) and is signed with HMAC-SHA256 when a signing key is set. Readers
check the header and its signature BEFORE unpickling, because unpickling runs code, and
hand pickle only verified chunks.

Format 3 is written where the optional ``blake3`` package is installed (the ``fast``
extra), format 2 where it is not; both are read. A reader without ``blake3`` facing a
format 3 envelope raises ``PayloadFormatUnsupported`` saying to install the extra.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import pickle
import struct
import sys
import threading
import types
from collections import ChainMap
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

import cloudpickle

from kinetic_core.errors import (
    PayloadFormatUnsupported,
    PayloadIntegrityError,
    SerializationError,
    StorageError,
)
from kinetic_core.records.chunks import (
    BLAKE3,
    CHUNK,
    SHA256,
    HashingWriter,
    VerifiedReader,
    blake3_available,
    digest_of,
    write_in_pieces,
)
from kinetic_core.storage import Storage
from kinetic_core.util import signing, version

#: 2: a sha256 per chunk of the body; 3: a BLAKE3 digest per chunk (the ``fast`` extra).
#: Format 1 (0.1.0) hashed the body whole; it is still read (as one chunk), never written.
FORMAT_SHA256 = 2
FORMAT_BLAKE3 = 3
_READABLE = (1, 2, 3)
_ALGORITHM = {1: SHA256, 2: SHA256, 3: BLAKE3}
MAGIC = b"KNTCENV1"
_TRAILER = struct.Struct(">Q")
_by_value_lock = threading.Lock()


def writing_format() -> int:
    """The envelope format this process writes: 3 where ``blake3`` is installed, else 2."""
    return FORMAT_BLAKE3 if blake3_available() else FORMAT_SHA256


def python_version() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


# The storage root is signed too: a signed envelope copied to another root (where the
# same job id exists, e.g. one idempotency key on two roots) is refused. ``sha256`` binds
# the chunk size and every chunk digest (``chunks.digest_of``).
_SIGNED = ("format", "kind", "job_id", "storage", "sha256", "body_len", "success")


def _signed_fields(header: dict[str, Any]) -> dict[str, Any]:
    return {k: header.get(k) for k in _SIGNED}


def _code_keeping_filename(code: types.CodeType) -> tuple[Any, ...]:
    """cloudpickle's reduction of a code object, with the code's own file name where
    cloudpickle >= 3.1.3 writes ``"<dynamic-code>"``: a remote traceback then names the
    file and line of the user's function (and shows the line where that file exists)."""
    cls, args = _CLOUDPICKLE_CODE_REDUCE(code)
    return cls, tuple(code.co_filename if arg == DYNAMIC_CODE else arg for arg in args)


DYNAMIC_CODE = "<dynamic-code>"
_CLOUDPICKLE_CODE_REDUCE = cloudpickle.Pickler.dispatch_table[types.CodeType]


class _Pickler(cloudpickle.Pickler):
    """cloudpickle's pickler; by-value functions keep the file name of their code."""

    dispatch_table = ChainMap(
        {types.CodeType: _code_keeping_filename}, cloudpickle.Pickler.dispatch_table
    )


def dump_envelope(
    fh: IO[bytes],
    obj: Any,
    *,
    kind: str,
    job_id: str,
    signing_key: str | None,
    storage: str,
    success: bool | None = None,
    by_value: Iterable[str] = (),
) -> dict[str, Any]:
    """Stream ``obj`` as an envelope into ``fh``; return the header written. ``storage``
    is the normalized URI of the root it is written to (bound by the signature).

    Raises SerializationError naming what could not be pickled, StorageError when the
    file cannot be written.
    """
    fmt = writing_format()
    writer = HashingWriter(fh, f"the {kind} of job {job_id}", _ALGORITHM[fmt])
    modules = list(by_value)
    with _by_value_lock:  # cloudpickle's by-value registry is process-global
        registered = [m for m in map(_register_by_value, modules) if m is not None]
        try:
            _Pickler(writer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
            digests = writer.finish()
        except StorageError:
            raise
        except Exception as exc:
            raise SerializationError(
                f"Cannot serialize the {kind} for job {job_id}: {type(exc).__name__}: {exc}. "
                "Functions and arguments must be picklable by cloudpickle: do not capture "
                "locks, sockets, open files or clients; create them inside the function."
            ) from exc
        finally:
            for module in registered:
                cloudpickle.unregister_pickle_by_value(module)
    header: dict[str, Any] = {
        "format": fmt,
        "kind": kind,
        "job_id": job_id,
        "storage": storage,
        "sha256": digest_of(writer.chunk, digests, writer.algorithm),
        "body_len": writer.size,
        "chunk": writer.chunk,
        "digests": digests,
        "success": success,
        "python": python_version(),
        "cloudpickle": cloudpickle.__version__,
        "kinetic": version.__version__,  # the runner compares (versions.py)
        "hmac": None,
    }
    if signing_key:
        header["hmac"] = signing.mac(signing_key, _signed_fields(header))
    raw = json.dumps(header).encode()
    writer.write_through(raw + _TRAILER.pack(len(raw)) + MAGIC)
    return header


def _register_by_value(module_name: str) -> Any:
    """Register a module for pickling by value; the module, or None if it already was."""
    import importlib

    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SerializationError(
            f"pickle_by_value names {module_name!r}, which cannot be imported here: {exc}"
        ) from exc
    if module_name in cloudpickle.list_registry_pickle_by_value():
        return None  # registered by the caller: theirs to unregister
    cloudpickle.register_pickle_by_value(module)
    return module


def read_header(fh: IO[bytes], *, where: str) -> dict[str, Any]:
    """Parse and sanity-check the header at the end of an envelope file."""
    fh.seek(0, 2)
    size = fh.tell()
    tail = len(MAGIC) + _TRAILER.size
    if size < tail:
        raise PayloadIntegrityError(f"{where} is truncated ({size} bytes): not a kinetic envelope.")
    fh.seek(size - tail)
    raw_len, magic = fh.read(_TRAILER.size), fh.read(len(MAGIC))
    if magic != MAGIC:
        raise PayloadIntegrityError(f"{where} is corrupt or not a kinetic envelope (bad trailer).")
    (header_len,) = _TRAILER.unpack(raw_len)
    if header_len > size - tail:
        raise PayloadIntegrityError(f"{where} is corrupt (header length {header_len}).")
    fh.seek(size - tail - header_len)
    try:
        header: dict[str, Any] = json.loads(fh.read(header_len))
    except ValueError as exc:
        raise PayloadIntegrityError(f"{where} has an unreadable header: {exc}") from None
    if header.get("format") not in _READABLE:
        raise PayloadIntegrityError(
            f"{where} uses envelope format {header.get('format')!r}; this kinetic-workflows "
            f"reads formats {', '.join(map(str, _READABLE))}. Use the same kinetic-workflows "
            "version on both sides."
        )
    if header.get("body_len", -1) + header_len + tail != size:
        raise PayloadIntegrityError(f"{where} is corrupt (size does not match its header).")
    return header


def _check_signature(header: dict[str, Any], *, where: str, signing_key: str | None) -> None:
    """Raise unless the header is signed with ``signing_key`` (or unsigned without one)."""
    if signing_key:
        if not header.get("hmac"):
            raise PayloadIntegrityError(
                f"{where} is unsigned but a signing key is configured: refusing to load it. "
                "Resubmit the job with the same KINETIC_SIGNING_KEY set on the submitting side."
            )
        if not signing.valid(signing_key, _signed_fields(header), header["hmac"]):
            raise PayloadIntegrityError(
                f"{where} has an invalid signature: it was forged, tampered with, or signed with "
                "another key. Check that both sides use the same KINETIC_SIGNING_KEY."
            )
    elif header.get("hmac"):
        raise PayloadIntegrityError(
            f"{where} is signed, but no signing key is configured here: set KINETIC_SIGNING_KEY "
            "(or the connection/block's signing key) to the key the job was submitted with."
        )


def _chunking(header: dict[str, Any], *, where: str) -> tuple[int, list[str]]:
    """The body's chunk size and chunk digests, once they add up to the (signed) sha256.
    The chunks themselves are checked as they are read. Format 3 needs ``blake3`` here
    (only here: its header alone, ``read_summary``, reads without it)."""
    if header["format"] == FORMAT_BLAKE3 and not blake3_available():
        raise PayloadFormatUnsupported(
            f"{where} is envelope format 3 (BLAKE3 chunk digests), and the blake3 package is "
            "not installed here: install it with pip install 'kinetic-workflows[fast]' (or pip "
            "install blake3) in this environment; a runner image needs it too when its "
            "submitters have it."
        )
    if header["format"] == 1:  # hashed whole: one chunk
        return max(header["body_len"], 1), [str(header.get("sha256"))]
    chunk, digests = header.get("chunk"), header.get("digests")
    if (
        not isinstance(chunk, int)
        or chunk <= 0
        or not isinstance(digests, list)
        or len(digests) != -(-header["body_len"] // chunk)
        or not all(isinstance(d, str) and len(d) == 64 for d in digests)
        or not hmac.compare_digest(
            digest_of(chunk, digests, _ALGORITHM[header["format"]]), str(header.get("sha256"))
        )
    ):
        raise PayloadIntegrityError(
            f"{where} failed its sha256 check: it is corrupt or was modified."
        )
    return chunk, digests


def skew_note(header: dict[str, Any]) -> str:
    """Explain version skew between the writer and this process, or ''."""
    notes = []
    if header.get("python") and header["python"] != python_version():
        notes.append(f"Python {header.get('python')} wrote it, this is Python {python_version()}")
    if header.get("cloudpickle") and header["cloudpickle"] != cloudpickle.__version__:
        notes.append(
            f"cloudpickle {header.get('cloudpickle')} wrote it, this has {cloudpickle.__version__}"
        )
    if not notes:
        return ""
    return (
        "Version skew: " + "; ".join(notes) + ". Run the job in an image with the same Python "
        "minor version and cloudpickle version as the submitter."
    )


@contextlib.contextmanager
def _verified(
    storage: Storage, key: str, *, kind: str, job_id: str, signing_key: str | None
) -> Iterator[tuple[dict[str, Any], VerifiedReader]]:
    """The envelope's header and a reader of its body once the header passed every check
    (kind and job, HMAC, sha256 and, signed, the storage root it was written for); the
    reader checks each chunk of the body as it reads it."""
    where = storage.location(key)
    with storage.open_read(key) as fh:
        header = read_header(fh, where=where)
        if header.get("kind") != kind or header.get("job_id") != job_id:
            raise PayloadIntegrityError(
                f"{where} holds a {header.get('kind')} envelope for job {header.get('job_id')!r}, "
                f"expected a {kind} envelope for {job_id!r}: it was copied from another job."
            )
        _check_signature(header, where=where, signing_key=signing_key)
        chunk, digests = _chunking(header, where=where)
        if signing_key and header.get("storage") != storage.uri:
            raise PayloadIntegrityError(
                f"{where} is a {kind} envelope of job {job_id!r} signed for storage "
                f"{header.get('storage')!r}, but it was read from {storage.uri!r}: it was copied "
                "between storage roots. Read the job from the storage it ran against, or "
                "resubmit it here."
            )
        reader = VerifiedReader(
            fh,
            size=header["body_len"],
            digests=digests,
            chunk=chunk,
            where=where,
            algorithm=_ALGORITHM[header["format"]],
        )
        yield header, reader


def load_envelope(
    storage: Storage,
    key: str,
    *,
    kind: str,
    job_id: str,
    signing_key: str | None,
    check: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[dict[str, Any], Any]:
    """Verify then unpickle an envelope. Raises PayloadIntegrityError before unpickling.
    ``check`` sees the verified header before anything is unpickled and may raise (the
    runner's version check: one header read per job start, not two)."""
    with _verified(storage, key, kind=kind, job_id=job_id, signing_key=signing_key) as (
        header,
        fh,
    ):
        if check is not None:
            check(header)
        return header, pickle.load(fh)


def rebind_envelope(
    storage: Storage,
    source: str,
    fh: IO[bytes],
    *,
    kind: str,
    job_id: str,
    new_job_id: str,
    signing_key: str | None,
) -> dict[str, Any]:
    """Copy the envelope at ``source`` (of ``job_id``) into ``fh``, bound to ``new_job_id``
    and re-signed. Verified first, never unpickled: the copier need not import the job's
    code. Raises PayloadIntegrityError like ``load_envelope``."""
    with _verified(storage, source, kind=kind, job_id=job_id, signing_key=signing_key) as (
        header,
        src,
    ):
        while piece := src.read(CHUNK):  # each piece verified before it is copied
            write_in_pieces(fh, piece)
    rebound = {**header, "job_id": new_job_id, "storage": storage.uri, "hmac": None}
    if signing_key:
        rebound["hmac"] = signing.mac(signing_key, _signed_fields(rebound))
    raw = json.dumps(rebound).encode()
    fh.write(raw + _TRAILER.pack(len(raw)) + MAGIC)
    return rebound


def read_summary(storage: Storage, key: str) -> dict[str, Any]:
    """The header alone (no unpickling): enough to tell success from failure."""
    with storage.open_read(key) as fh:
        return read_header(fh, where=storage.location(key))


# ---- result bodies ------------------------------------------------------------------------


def failure_body(exc: BaseException, *, phase: str, traceback_text: str) -> dict[str, Any]:
    """A result body for a failure. The exception travels pickled when it can."""
    exc_pickle: bytes | None
    try:
        exc_pickle = cloudpickle.dumps(exc)
        pickle.loads(exc_pickle)  # some exceptions pickle but cannot be rebuilt
    except Exception:
        exc_pickle = None
    return {
        "success": False,
        "value": None,
        "exc_pickle": exc_pickle,
        "exc_type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "exc_message": str(exc),
        "traceback": traceback_text,
        "phase": phase,
    }


def success_body(value: Any) -> dict[str, Any]:
    return {"success": True, "value": value, "phase": "run"}


def rebuild_exception(body: dict[str, Any], job_id: str) -> BaseException:
    """The remote exception as its original type with the remote traceback as a note.

    Falls back to RemoteError when the type cannot be unpickled or imported here.
    """
    from kinetic_core.errors import RemoteError

    exc: BaseException | None = None
    raw = body.get("exc_pickle")
    if raw:
        try:
            exc = pickle.loads(raw)
        except Exception:
            exc = None
    if not isinstance(exc, BaseException):
        return RemoteError(
            body["exc_type"],
            body["exc_message"],
            body.get("traceback", ""),
            body.get("phase", "run"),
        )
    exc.add_note(
        f"Remote traceback (kinetic job {job_id}, phase {body.get('phase')}):\n{body.get('traceback', '')}"
    )
    return exc
