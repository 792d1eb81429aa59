"""Writing many jobs fast for index tests and ``bench/listing.py``: the project's own
writers (``job_index.note_created``, the handle record, ``lifecycle.decide``), no processes;
and a Storage that counts the requests made through it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import BinaryIO

import kinetic_core as kc
from kinetic_core.records import job_index, layout, lifecycle
from kinetic_core.storage import Storage

#: A day's worth of nightly history: one job every 10 minutes.
SPACING = 600.0
START = 1_764_000_000.0  # 2025-11-24, a fixed past: every job is far older than lost_grace
STATUSES = ("SUCCEEDED", "FAILED", "CANCELLED")


def write_job(
    storage: Storage,
    job_id: str,
    created_at: float,
    *,
    status: str | None = None,
    tags: dict[str, str] | None = None,
    owner: str = "alice",
    name: str = "nightly",
    indexed: bool = True,
) -> kc.JobHandle:
    """A job as submit leaves it (index entry, then ``handle.json``), ended as ``status``
    decides (outcome and end entry) unless None (never launched: it reads Lost)."""
    handle = kc.JobHandle(
        job_id=job_id,
        storage=storage.uri,
        target={"backend": "local", "storage": storage.uri},
        name=name,
        created_at=created_at,
        tags=tags or {},
        owner=owner,
    )
    if indexed:
        job_index.note_created(storage, handle.record())
    storage.write_bytes(layout.job_file(job_id, layout.HANDLE), handle.record(), create_only=True)
    if status is not None:
        if indexed:
            lifecycle.decide(storage, job_id, status, None, None, by="test")
        else:  # an older version: the outcome without an end entry
            lifecycle.write_record(
                storage, job_id, layout.OUTCOME, create_only=True, status=status, reason=None
            )
    return handle


def write_history(storage: Storage, count: int, *, indexed: bool = True) -> list[str]:
    """``count`` ended jobs, one every ``SPACING`` seconds, owners alternating; ids
    newest first. Indexed, the store is marked complete, as its first listing would."""
    if indexed:
        job_index.mark_complete(storage)
    ids = []
    for i in range(count):
        job_id = f"job-{i:07d}"
        write_job(
            storage,
            job_id,
            START + i * SPACING,
            status=STATUSES[i % 3],
            owner="alice" if i % 2 else "bob",
            indexed=indexed,
        )
        ids.append(job_id)
    return ids[::-1]


class CountingStorage:
    """A Storage whose every request is counted by method name (``calls``)."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.calls: Counter[str] = Counter()

    def total(self) -> int:
        return sum(self.calls.values())

    # The protocol's methods, spelled out so isinstance(..., Storage) holds.
    def read_bytes(self, key: str) -> bytes:
        self.calls["read_bytes"] += 1
        return self.inner.read_bytes(key)

    def write_bytes(self, key: str, data: bytes, *, create_only: bool = False) -> None:
        self.calls["write_bytes"] += 1
        self.inner.write_bytes(key, data, create_only=create_only)

    def open_read(self, key: str) -> AbstractContextManager[BinaryIO]:
        self.calls["open_read"] += 1
        return self.inner.open_read(key)

    def open_write(
        self, key: str, *, create_only: bool = False
    ) -> AbstractContextManager[BinaryIO]:
        self.calls["open_write"] += 1
        return self.inner.open_write(key, create_only=create_only)

    def exists(self, key: str) -> bool:
        self.calls["exists"] += 1
        return self.inner.exists(key)

    def list_names(self, prefix: str) -> list[str]:
        self.calls["list_names"] += 1
        return self.inner.list_names(prefix)

    def delete(self, key: str) -> None:
        self.calls["delete"] += 1
        self.inner.delete(key)

    def delete_prefix(self, prefix: str) -> None:
        self.calls["delete_prefix"] += 1
        self.inner.delete_prefix(prefix)

    def location(self, key: str) -> str:
        return self.inner.location(key)

    def put_file(self, key: str, source: str, *, create_only: bool = False) -> None:
        self.calls["put_file"] += 1
        self.inner.put_file(key, source, create_only=create_only)

    def get_file(self, key: str, dest: str) -> None:
        self.calls["get_file"] += 1
        self.inner.get_file(key, dest)

    def walk(self, prefix: str) -> list[str]:
        self.calls["walk"] += 1
        return self.inner.walk(prefix)

    def local_path(self, key: str) -> str | None:
        return self.inner.local_path(key)


def counting(uri: str) -> Iterator[CountingStorage]:
    """Route every ``open_storage(uri)`` of this process through a CountingStorage."""
    from kinetic_core import storage as storage_module

    real = storage_module.open_storage(uri)
    wrapper = CountingStorage(real)
    storage_module._cache[uri] = wrapper  # type: ignore[assignment]
    try:
        yield wrapper
    finally:
        storage_module._cache[uri] = real
