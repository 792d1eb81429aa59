"""GCSStorage against the in-process GCS emulator with the real google-cloud-storage client.

The emulator fixture enforces generation preconditions (tests/gcs_emulator.py), so the
create-only tests below exercise the real ``if_generation_match=0`` path.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from gcs_emulator import GCSEmulator

import kinetic_core
from kinetic_core.errors import StorageError
from kinetic_core.storage import open_storage
from kinetic_core.storage.gcs import GCSStorage
from tests.racing import race


@pytest.fixture
def store(gcs_emulator: GCSEmulator) -> Iterator[GCSStorage]:
    """A fresh prefix per test (the emulator lives for the whole session)."""
    gcs_emulator.fail_next(0)
    yield GCSStorage(gcs_emulator.uri(f"t-{uuid.uuid4().hex[:12]}"))
    gcs_emulator.fail_next(0)


def _scope(store: GCSStorage) -> str:
    """The store's unique prefix: in every request it makes, so faults hit only this test."""
    return store.uri.rsplit("/", 1)[-1]


# ---- the storage contract -------------------------------------------------------------------


def test_write_read_round_trip_and_overwrite(store: GCSStorage) -> None:
    store.write_bytes("jobs/a/handle.json", b'{"x": 1}')
    assert store.read_bytes("jobs/a/handle.json") == b'{"x": 1}'
    store.write_bytes("jobs/a/handle.json", b"second")  # plain writes overwrite
    assert store.read_bytes("jobs/a/handle.json") == b"second"
    store.write_bytes("empty", b"")
    assert store.read_bytes("empty") == b""
    assert store.location("jobs/a/handle.json") == f"{store.uri}/jobs/a/handle.json"
    assert store.uri.startswith("gs://kinetic-test/t-")


def test_missing_object_is_file_not_found(store: GCSStorage) -> None:
    with pytest.raises(FileNotFoundError, match="nope"):
        store.read_bytes("nope")
    with pytest.raises(FileNotFoundError, match="nope"), store.open_read("nope"):
        pass


def test_create_only_twice_keeps_first(store: GCSStorage) -> None:
    store.write_bytes("k", b"first", create_only=True)
    with pytest.raises(FileExistsError, match="/k"):
        store.write_bytes("k", b"second", create_only=True)
    with pytest.raises(FileExistsError), store.open_write("k", create_only=True) as fh:
        fh.write(b"third")
    assert store.read_bytes("k") == b"first"


def test_create_only_race_has_exactly_one_winner(store: GCSStorage) -> None:
    results = race(
        50, lambda i: store.write_bytes("lock", f"writer {i}".encode(), create_only=True)
    )
    winners = [i for i, r in enumerate(results) if r is None]
    losers = [r for r in results if isinstance(r, FileExistsError)]
    assert len(winners) == 1, results
    assert len(losers) == 49, results
    assert store.read_bytes("lock") == f"writer {winners[0]}".encode()


def test_open_write_that_raises_publishes_nothing(store: GCSStorage) -> None:
    for create_only in (False, True):
        with (
            pytest.raises(RuntimeError),
            store.open_write("partial", create_only=create_only) as fh,
        ):
            fh.write(b"half of it")
            raise RuntimeError("boom")
        assert not store.exists("partial")
        assert store.list_names("") == []
    store.write_bytes("partial", b"whole", create_only=True)  # the key is still free
    assert store.read_bytes("partial") == b"whole"


def test_large_streamed_object_round_trip(store: GCSStorage) -> None:
    """50 MB: a multi-chunk resumable upload in, a streamed download into a temp file out."""
    chunk = os.urandom(1 << 20)
    digest = hashlib.sha256()
    with store.open_write("big.bin", create_only=True) as fh:
        for i in range(50):
            piece = bytes([i]) + chunk[1:]
            fh.write(piece)
            digest.update(piece)
    with store.open_read("big.bin") as fh:
        fh.seek(-(1 << 20), os.SEEK_END)  # seekable, like a local file
        assert fh.read(1) == bytes([49])
        fh.seek(0)
        got = hashlib.sha256()
        while block := fh.read(1 << 22):
            got.update(block)
    assert got.hexdigest() == digest.hexdigest()
    with pytest.raises(FileExistsError), store.open_write("big.bin", create_only=True) as fh:
        fh.write(chunk * 10)  # > 8 MiB: the resumable path also honours create-only


def test_list_names_immediate_children(store: GCSStorage) -> None:
    for key in (
        "jobs/a/handle.json",
        "jobs/a/events/x.json",
        "jobs/b/handle.json",
        "jobs/top.json",
        "jobsx/other.json",
        "keys/k.json",
    ):
        store.write_bytes(key, b"1")
    assert store.list_names("jobs") == ["a", "b", "top.json"]
    assert store.list_names("jobs/") == ["a", "b", "top.json"]
    assert store.list_names("jobs/a") == ["events", "handle.json"]
    assert store.list_names("") == ["jobs", "jobsx", "keys"]
    assert store.list_names("absent") == []
    assert store.list_names("jobs/top.json") == []  # an object is not a folder


def test_delete_and_delete_prefix(store: GCSStorage) -> None:
    for key in ("jobs/a/handle.json", "jobs/a/x/y.json", "jobs/ab/handle.json", "keys/k.json"):
        store.write_bytes(key, b"1")
    store.delete("keys/k.json")
    store.delete("keys/k.json")  # absent is fine
    assert not store.exists("keys/k.json")
    store.delete_prefix("jobs/a")
    assert store.list_names("jobs") == ["ab"]  # a sibling sharing the prefix text survives
    assert store.exists("jobs/ab/handle.json")
    store.delete_prefix("jobs/a")  # absent is fine
    store.delete_prefix("nothing/here")


def test_exists(store: GCSStorage) -> None:
    assert not store.exists("jobs/a/handle.json")
    store.write_bytes("jobs/a/handle.json", b"{}")
    assert store.exists("jobs/a/handle.json")
    assert not store.exists("jobs/a")  # a "folder" is not an object


def test_missing_bucket_is_a_helpful_storage_error(gcs_emulator: GCSEmulator) -> None:
    missing = GCSStorage("gs://no-such-bucket-kinetic/prefix")
    for call in (
        lambda: missing.read_bytes("k"),
        lambda: missing.write_bytes("k", b"1"),
        lambda: missing.exists("k"),
        lambda: missing.list_names("jobs"),
    ):
        with pytest.raises(StorageError) as info:
            call()
        message = str(info.value)
        assert "no-such-bucket-kinetic" in message
        assert "does not exist" in message
        assert "KINETIC_STORAGE" in message


def test_open_storage_picks_gcs_for_gs_uris(gcs_emulator: GCSEmulator) -> None:
    uri = gcs_emulator.uri(f"t-{uuid.uuid4().hex[:12]}")
    storage = open_storage(uri)
    assert isinstance(storage, GCSStorage)
    assert isinstance(storage, kinetic_core.storage.Storage)  # type: ignore[attr-defined]
    assert open_storage(uri) is storage


# ---- transient errors and retries ------------------------------------------------------------


def test_transient_errors_are_retried(gcs_emulator: GCSEmulator, store: GCSStorage) -> None:
    store.exists("warm-up")  # the lazy bucket check is done; count only the calls below
    gcs_emulator.fail_next(3, 503, match=_scope(store))
    store.write_bytes("k", b"value")
    assert gcs_emulator.injected == 3
    gcs_emulator.fail_next(2, 429, match=_scope(store))
    assert store.read_bytes("k") == b"value"
    assert gcs_emulator.injected == 2
    gcs_emulator.fail_next(2, 500, match=_scope(store))
    assert store.list_names("") == ["k"] and gcs_emulator.injected == 2
    gcs_emulator.fail_next(2, 502, match=_scope(store))
    with store.open_read("k") as fh:
        assert fh.read() == b"value"
    assert gcs_emulator.injected == 2


def test_transient_errors_that_outlast_the_policy_are_storage_errors(
    gcs_emulator: GCSEmulator, store: GCSStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The google exception never escapes: one mapping turns it into a KineticError."""
    from tenacity import stop_after_attempt, wait_none

    import kinetic_core.storage.gcs as gcs_module

    shortened = gcs_module.TRANSIENT_RETRY.copy(stop=stop_after_attempt(3), wait=wait_none())
    monkeypatch.setattr(gcs_module, "TRANSIENT_RETRY", shortened)
    store.exists("warm-up")
    for call in (
        lambda: store.read_bytes("k"),
        lambda: store.write_bytes("k", b"v"),
        lambda: store.list_names("jobs"),
    ):
        gcs_emulator.fail_next(10, 503, match=_scope(store))
        with pytest.raises(StorageError, match=r"503.*gave up after retrying") as info:
            call()
        assert isinstance(info.value, kinetic_core.KineticError)
        assert gcs_emulator.injected == 3  # the policy's attempts, then it gave up
    gcs_emulator.fail_next(0)


def test_non_transient_errors_fail_at_once(gcs_emulator: GCSEmulator, store: GCSStorage) -> None:
    store.exists("warm-up")
    gcs_emulator.fail_next(5, 400, match=_scope(store))
    with pytest.raises(StorageError, match="400"):
        store.write_bytes("k", b"value")
    assert gcs_emulator.injected == 1  # not retried
    gcs_emulator.fail_next(0)
    assert not store.exists("k")


@pytest.mark.parametrize("status", [401, 403])
def test_auth_errors_name_the_credentials(
    gcs_emulator: GCSEmulator, store: GCSStorage, status: int
) -> None:
    store.exists("warm-up")
    probe = f"auth-probe-{status}"
    gcs_emulator.fail_next(1, status, match=probe)
    with pytest.raises(StorageError) as info:
        store.read_bytes(probe)
    assert "GOOGLE_APPLICATION_CREDENTIALS" in str(info.value)
    assert "Workload Identity" in str(info.value)
    assert gcs_emulator.injected == 1


def test_retried_create_only_whose_first_try_won_is_not_file_exists(
    gcs_emulator: GCSEmulator, store: GCSStorage
) -> None:
    """The upload takes effect but its response is lost (503): the retry sees 412."""
    store.exists("warm-up")
    gcs_emulator.fail_next(1, 503, after_work=True, match=_scope(store))
    store.write_bytes("result.pkl", b"mine", create_only=True)
    assert gcs_emulator.injected == 1
    assert store.read_bytes("result.pkl") == b"mine"
    # Streamed and large (resumable upload: POST opens a session, PUT sends the bytes and
    # finalizes): the final PUT takes effect but its answer is lost.
    gcs_emulator.fail_next(1, 503, after_work=True, skip=1, match=_scope(store))
    with store.open_write("big.pkl", create_only=True) as fh:
        fh.write(b"x" * (9 << 20))
    assert gcs_emulator.injected == 1
    assert gcs_emulator.injected_requests[0].startswith("PUT /upload/")
    assert store.read_bytes("big.pkl") == b"x" * (9 << 20)


def test_retried_create_only_that_lost_to_another_writer_is_file_exists(
    gcs_emulator: GCSEmulator, store: GCSStorage
) -> None:
    store.write_bytes("lock", b"theirs", create_only=True)
    gcs_emulator.fail_next(
        1, 503, match=_scope(store)
    )  # our first try fails, the retry meets their object
    with pytest.raises(FileExistsError):
        store.write_bytes("lock", b"mine", create_only=True)
    assert gcs_emulator.injected == 1
    assert store.read_bytes("lock") == b"theirs"


# ---- the fixture really enforces preconditions -------------------------------------------------


def test_emulator_enforces_generation_preconditions(
    gcs_emulator: GCSEmulator, store: GCSStorage
) -> None:
    from google.api_core.exceptions import PreconditionFailed
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs

    client = gcs.Client(project="test", credentials=AnonymousCredentials())
    bucket = client.bucket(gcs_emulator.bucket)
    name = f"{store.prefix}/pre"
    bucket.blob(name).upload_from_string(b"v1", if_generation_match=0)
    with pytest.raises(PreconditionFailed):  # multipart
        bucket.blob(name).upload_from_string(b"v2", if_generation_match=0)
    generation = bucket.get_blob(name).generation
    with pytest.raises(PreconditionFailed):  # a stale generation
        bucket.blob(name).upload_from_string(b"v2", if_generation_match=generation + 1)
    bucket.blob(name).upload_from_string(b"v3", if_generation_match=generation)
    assert bucket.blob(name).download_as_bytes() == b"v3"

    # Resumable: the session is opened while the object is absent, someone else creates it,
    # then the final PUT of our session must fail rather than overwrite.
    name2 = f"{store.prefix}/resumable"
    session = bucket.blob(name2).create_resumable_upload_session(
        size=2, if_generation_match=0, client=client
    )
    bucket.blob(name2).upload_from_string(b"first", if_generation_match=0)
    response = client._http.put(session, data=b"xx", headers={"Content-Range": "bytes 0-1/2"})
    assert response.status_code == 412
    assert bucket.blob(name2).download_as_bytes() == b"first"


def test_google_cloud_is_not_imported_for_file_storage(tmp_path: Path) -> None:
    code = (
        "import sys; from kinetic_core.storage import open_storage; import kinetic_core.runtime.runner; "
        f"s = open_storage('file://{tmp_path}'); s.write_bytes('a', b'1'); "
        "assert s.read_bytes('a') == b'1'; "
        "print(sorted(m for m in sys.modules if m.startswith(('google', 'kinetic_core.storage.gcs'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# ---- end to end: the public API with gs:// storage and the local backend ----------------------


def add(a: int, b: int) -> int:
    return a + b


def identify(tag: str) -> str:
    return f"{tag} from {os.environ.get('KINETIC_JOB_ID')}"


def test_submit_and_result_through_gcs(gcs_emulator: GCSEmulator, tmp_path: Path) -> None:
    # local_dir: keep backend records per test (the default, ~/.kinetic, is shared).
    target = kinetic_core.Target(
        storage=gcs_emulator.uri(f"e2e-{uuid.uuid4().hex[:12]}"), local_dir=str(tmp_path / "local")
    )
    handle = kinetic_core.submit(add, (2, 40), target=target)
    assert handle.storage.startswith("gs://kinetic-test/e2e-")
    assert handle.location == f"{handle.storage}/jobs/{handle.job_id}"
    assert handle.result(timeout=120) == 42
    storage = open_storage(handle.storage)
    assert storage.list_names("jobs") == [handle.job_id]
    assert not storage.exists(f"jobs/{handle.job_id}/payload.pkl")  # cleaned up after collect


def test_idempotent_submit_from_20_threads_makes_one_job(
    gcs_emulator: GCSEmulator, tmp_path: Path
) -> None:
    target = kinetic_core.Target(
        storage=gcs_emulator.uri(f"e2e-{uuid.uuid4().hex[:12]}"), local_dir=str(tmp_path / "local")
    )
    key = f"gcs-idempotent-{uuid.uuid4().hex}"
    results = race(
        20, lambda i: kinetic_core.submit(identify, ("hello",), target=target, idempotency_key=key)
    )
    errors = [r for r in results if isinstance(r, BaseException)]
    assert errors == []
    job_ids = {r.job_id for r in results}  # type: ignore[union-attr]
    assert len(job_ids) == 1
    (job_id,) = job_ids
    storage = open_storage(results[0].storage)  # type: ignore[union-attr]
    assert storage.list_names("jobs") == [job_id]
    assert results[0].result(timeout=120) == f"hello from {job_id}"  # type: ignore[union-attr]


def speak(line: str) -> str:
    print(line, flush=True)
    return line


def test_a_runners_log_tee_reaches_gcs_from_its_forked_pump(
    gcs_emulator: GCSEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pump is forked from the runner, whose GCS client already holds pooled
    connections: the pump opens its own client (``storage.open_fresh``)."""
    from kinetic_core.records.log_chunks import read_all

    monkeypatch.setenv("KINETIC_LOG_TO_STORAGE", "1")  # the local job's stdout is a file
    target = kinetic_core.Target(
        storage=gcs_emulator.uri(f"e2e-{uuid.uuid4().hex[:12]}"), local_dir=str(tmp_path / "local")
    )
    handle = kinetic_core.submit(speak, ("through the pump",), target=target)
    assert handle.result(timeout=120, cleanup=False) == "through the pump"
    assert read_all(open_storage(handle.storage), handle.job_id) == "through the pump\n"
