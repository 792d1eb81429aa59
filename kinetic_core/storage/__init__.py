"""Storage: where handles, envelopes, events and batch records live.

Keys are ``/``-separated paths relative to the storage root (see docs/concepts.md for the
layout). Storage knows nothing about backends or payload contents.
"""

from __future__ import annotations

import errno
import threading
from contextlib import AbstractContextManager
from typing import BinaryIO, Protocol, runtime_checkable

from kinetic_core.errors import ConfigError, StorageError
from kinetic_core.util import registry


@runtime_checkable
class Storage(Protocol):
    uri: str

    def read_bytes(self, key: str) -> bytes:
        """Whole object; raises FileNotFoundError when absent."""

    def write_bytes(self, key: str, data: bytes, *, create_only: bool = False) -> None:
        """Atomic write. With ``create_only`` raise FileExistsError if the key exists."""

    def open_read(self, key: str) -> AbstractContextManager[BinaryIO]:
        """A seekable local file with the object's bytes (downloaded first if remote)."""

    def open_write(
        self, key: str, *, create_only: bool = False
    ) -> AbstractContextManager[BinaryIO]:
        """A file to stream into; published atomically when the block exits cleanly."""

    def exists(self, key: str) -> bool: ...

    def list_names(self, prefix: str) -> list[str]:
        """Immediate child names (files and folders) under ``prefix``; [] when absent."""

    def delete(self, key: str) -> None:
        """Remove one object; absent is fine."""

    def delete_prefix(self, prefix: str) -> None:
        """Remove everything under ``prefix``; absent is fine."""

    def location(self, key: str) -> str:
        """A URI for humans and links (file://... or gs://...)."""

    def put_file(self, key: str, source: str, *, create_only: bool = False) -> None:
        """Stream a local file to ``key``, published atomically (the data plane's upload)."""

    def get_file(self, key: str, dest: str) -> None:
        """Stream ``key`` into the local file ``dest``; FileNotFoundError when absent."""

    def walk(self, prefix: str) -> list[str]:
        """Every object under ``prefix``, recursively, as ``/``-paths relative to it."""

    def local_path(self, key: str) -> str | None:
        """A local path holding ``key``'s bytes where storage is a local disk, else None."""


_cache: dict[str, Storage] = {}
_lock = threading.Lock()


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
