"""The Storage protocol's contract, run against every backend: file:// and gs:// (emulator).

Whatever jobs.py, status.py and the runner rely on must hold on both, so a behaviour that
differs between backends shows up here rather than in a job on a real bucket.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kinetic_core.errors import StorageError
from kinetic_core.storage import Storage
from kinetic_core.storage.local import LocalStorage
from tests.core.readonly import read_only
from tests.racing import race


@pytest.fixture(params=["file", "gcs"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    if request.param == "file":
        return LocalStorage(f"file://{tmp_path / 'root'}")
    from kinetic_core.storage.gcs import GCSStorage

    emulator = request.getfixturevalue("gcs_emulator")
    emulator.fail_next(0)
    return GCSStorage(emulator.uri(f"contract-{uuid.uuid4().hex[:12]}"))


def test_is_a_storage(storage: Storage) -> None:
    assert isinstance(storage, Storage)
    assert storage.location("jobs/x/handle.json").endswith("/jobs/x/handle.json")
    assert storage.location("jobs/x").split("://", 1)[0] in ("file", "gs")


def test_round_trip_overwrite_and_missing(storage: Storage) -> None:
    with pytest.raises(FileNotFoundError):
        storage.read_bytes("jobs/x/handle.json")
    storage.write_bytes("jobs/x/handle.json", b"one")
    storage.write_bytes("jobs/x/handle.json", b"two")
    assert storage.read_bytes("jobs/x/handle.json") == b"two"
    with storage.open_read("jobs/x/handle.json") as fh:
        assert fh.read() == b"two"
        fh.seek(1)
        assert fh.read() == b"wo"
    with pytest.raises(FileNotFoundError), storage.open_read("jobs/x/absent"):
        pass


def test_create_only(storage: Storage) -> None:
    storage.write_bytes("jobs/x/result.pkl", b"first", create_only=True)
    with pytest.raises(FileExistsError):
        storage.write_bytes("jobs/x/result.pkl", b"second", create_only=True)
    with (
        pytest.raises(FileExistsError),
        storage.open_write("jobs/x/result.pkl", create_only=True) as fh,
    ):
        fh.write(b"third")
    assert storage.read_bytes("jobs/x/result.pkl") == b"first"


def test_create_only_race_one_winner(storage: Storage) -> None:
    results = race(20, lambda i: storage.write_bytes("keys/k.json", b"%d" % i, create_only=True))
    winners = [i for i, r in enumerate(results) if r is None]
    assert len(winners) == 1, results
    assert all(isinstance(r, FileExistsError) for r in results if r is not None), results
    assert storage.read_bytes("keys/k.json") == b"%d" % winners[0]


def test_nested_create_only_lock_inside_open_write(storage: Storage) -> None:
    """What jobs.create does: the payload is published only if its handle.json lock is won."""
    with storage.open_write("jobs/x/payload.pkl", create_only=True) as fh:
        fh.write(b"payload 1")
        storage.write_bytes("jobs/x/handle.json", b"h1", create_only=True)
    with (
        pytest.raises(FileExistsError),
        storage.open_write("jobs/y/payload.pkl", create_only=True) as fh,
    ):
        fh.write(b"payload 2")
        storage.write_bytes("jobs/x/handle.json", b"h2", create_only=True)
    assert storage.read_bytes("jobs/x/payload.pkl") == b"payload 1"
    assert not storage.exists("jobs/y/payload.pkl")
    assert storage.list_names("jobs") == ["x"]


def test_failed_open_write_publishes_nothing(storage: Storage) -> None:
    with pytest.raises(ValueError), storage.open_write("jobs/x/payload.pkl") as fh:
        fh.write(b"partial")
        raise ValueError("pickling failed")
    assert not storage.exists("jobs/x/payload.pkl")
    assert storage.list_names("jobs/x") == []


def test_list_names_exists_delete(storage: Storage) -> None:
    for key in (
        "jobs/a/handle.json",
        "jobs/a/started.json",
        "jobs/b/handle.json",
        "jobs/bc/handle.json",
        "batches/g/children/0.json",
    ):
        storage.write_bytes(key, b"{}")
    assert storage.list_names("jobs") == ["a", "b", "bc"]
    assert storage.list_names("jobs/a") == ["handle.json", "started.json"]
    assert storage.list_names("batches/g") == ["children"]
    assert storage.list_names("nope") == []
    assert storage.exists("jobs/a/started.json")
    storage.delete("jobs/a/started.json")
    storage.delete("jobs/a/started.json")
    assert not storage.exists("jobs/a/started.json")
    storage.delete_prefix("jobs/b")
    assert storage.list_names("jobs") == ["a", "bc"]
    storage.delete_prefix("jobs/b")
    storage.delete_prefix("batches")
    assert storage.list_names("batches") == []


@contextmanager
def refusing_writes(storage: Storage, request: pytest.FixtureRequest) -> Iterator[None]:
    """Storage that refuses changes: a read-only mount for file://; for gs://, the
    emulator answers 403 (what a reader-only identity gets) to requests on its objects."""
    if isinstance(storage, LocalStorage):
        with read_only(storage.root):
            yield
        return
    emulator = request.getfixturevalue("gcs_emulator")
    prefix = storage.location("").removeprefix(f"gs://{emulator.bucket}/").strip("/")
    emulator.fail_next(10_000, 403, match=prefix)  # unique per test: in paths and upload bodies
    try:
        yield
    finally:
        emulator.fail_next(0)


def test_read_only_storage_raises_storage_error_and_keeps_absent_signals(
    storage: Storage, request: pytest.FixtureRequest
) -> None:
    """Deleting (and writing) where storage refuses changes is a StorageError, never a bare
    OSError; "absent" and "exists already" stay FileNotFoundError and FileExistsError."""
    storage.write_bytes("jobs/x/result.pkl", b"value")
    storage.write_bytes("jobs/x/handle.json", b"h")
    with refusing_writes(storage, request):
        with pytest.raises(StorageError):
            storage.delete("jobs/x/result.pkl")
        with pytest.raises(StorageError):
            storage.delete_prefix("jobs/x")
        with pytest.raises(StorageError):
            storage.write_bytes("jobs/x/started.json", b"{}")
        if isinstance(storage, LocalStorage):  # reads still work on a read-only mount
            with pytest.raises(FileExistsError):
                storage.write_bytes("jobs/x/handle.json", b"h2", create_only=True)
            with pytest.raises(FileNotFoundError):
                storage.read_bytes("jobs/x/absent")
            assert storage.read_bytes("jobs/x/result.pkl") == b"value"
            assert storage.list_names("jobs/x") == ["handle.json", "result.pkl"]
            storage.delete("jobs/x/absent")  # absent is fine, read-only or not
            storage.delete_prefix("jobs/none")
    assert storage.read_bytes("jobs/x/result.pkl") == b"value"  # nothing was deleted
