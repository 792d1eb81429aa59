"""What every storage implements (``storage/local.py``, ``storage/gcs.py``): ``Storage``.

Keys are ``/``-separated paths relative to the storage root. Imported as
``kinetic_core.storage.Storage``.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import BinaryIO, Protocol, runtime_checkable


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
