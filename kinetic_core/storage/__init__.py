"""Storage: where handles, envelopes, events and batch records live.

Keys are ``/``-separated paths relative to the storage root (see docs/concepts.md for the
layout). Storage knows nothing about backends or payload contents.
"""

from __future__ import annotations

import _thread
import errno

from kinetic_core.errors import ConfigError, StorageError
from kinetic_core.util import registry

TYPE_CHECKING = False
if TYPE_CHECKING:
    from kinetic_core.storage.protocol import Storage as Storage


def __getattr__(name: str) -> object:
    """``Storage``, the protocol, is imported when first named: ``typing`` is not on a
    job's start path (``runtime/runner.py``), whose modules name it only in annotations."""
    if name == "Storage":
        from kinetic_core.storage.protocol import Storage

        return Storage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_cache: dict[str, Storage] = {}
_lock = _thread.allocate_lock()  # threading's Lock, without importing threading


def open_storage(uri: str) -> Storage:
    """The Storage for a (normalized) URI, cached per process.

    The scheme's module is imported only when first used (``google.cloud`` only for
    ``gs://`` URIs): the runner must start fast.
    """
    with _lock:
        if uri not in _cache:
            _cache[uri] = open_fresh(uri)
        return _cache[uri]


def open_fresh(uri: str) -> Storage:
    """A new Storage for ``uri``, not the cached one: what a forked child uses (the
    parent's client and its pooled connections stay the parent's)."""
    scheme, sep, _ = uri.partition("://")
    if not sep or scheme not in registry.STORAGE:
        schemes = " or ".join(f"{name}://" for name in registry.STORAGE)
        raise ConfigError(f"Unsupported storage URI {uri!r}: use {schemes}.")
    return registry.storage_factory(scheme)(uri)


def storage_failed(doing: str, where: str, exc: OSError) -> StorageError:
    """THE message for a storage operation the system refused (``doing``: read, write,
    delete, list): it says why (full disk, read-only, permissions) and what to do."""
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return StorageError(
            f"Cannot {doing} {where}: the disk is full ({reason}). Free space on the "
            "storage volume, or point KINETIC_STORAGE / storage= at another one."
        )
    if exc.errno == errno.EROFS:
        return StorageError(
            f"Cannot {doing} {where}: the storage is read-only ({reason}). Mount it "
            "writable, or point KINETIC_STORAGE / storage= at writable storage."
        )
    if exc.errno in (errno.EACCES, errno.EPERM):
        return StorageError(
            f"Cannot {doing} {where}: permission denied ({reason}). Fix its permissions "
            "for the user this process runs as, or point KINETIC_STORAGE / storage= elsewhere."
        )
    return StorageError(f"Cannot {doing} {where}: {reason}.")


def write_failed(where: str, exc: OSError) -> StorageError:
    """THE message for a failed write: a full disk says so (it is not a pickling problem)."""
    return storage_failed("write", where, exc)
