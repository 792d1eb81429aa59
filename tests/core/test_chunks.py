"""Envelope bodies are hashed per chunk, read once, and never reach pickle unchecked."""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import random
import struct
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

import kinetic_core as kc
from kinetic_core.records import chunks
from kinetic_core.records.chunks import HashingWriter, VerifiedReader, digest_of
from kinetic_core.records.envelope import (
    _SIGNED,
    MAGIC,
    dump_envelope,
    load_envelope,
    rebind_envelope,
)
from kinetic_core.storage import open_storage
from kinetic_core.util import signing
from tests.core.envelopes import Marker, write_envelope
from tests.core.formats import with_format

SMALL = 4096  # many chunks from small test values
ALGORITHM = {"algorithm": chunks.SHA256}  # the digest of the format under test


@pytest.fixture(autouse=True, params=[2, 3], ids=["format2", "format3"])
def envelope_format(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Every test here runs once per written format: 2 (sha256) and 3 (BLAKE3)."""
    monkeypatch.setitem(ALGORITHM, "algorithm", with_format(monkeypatch, request.param))
    return int(request.param)


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunks, "CHUNK", SMALL)


def _expected(body: bytes, chunk: int) -> list[str]:
    new = chunks.hash_function(ALGORITHM["algorithm"])
    return [new(body[i : i + chunk]).hexdigest() for i in range(0, len(body), chunk)]


def test_digests_do_not_depend_on_how_the_writes_are_split(small_chunks: None) -> None:
    body = random.Random(7).randbytes(10 * SMALL + 123)
    for seed in range(20):
        rng = random.Random(seed)
        writer = HashingWriter(io.BytesIO(), "test", ALGORITHM["algorithm"])
        pos = 0
        while pos < len(body):
            n = rng.choice([1, 7, SMALL - 1, SMALL, 3 * SMALL + 5])
            writer.write(body[pos : pos + n])
            pos += n
        assert writer.finish() == _expected(body, SMALL)
        assert writer.fh.getvalue() == body  # type: ignore[attr-defined]


class _RecordingFile(io.BytesIO):
    """Keeps the size of every write it is given."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def write(self, data: Any) -> int:
        self.sizes.append(memoryview(data).nbytes)
        return super().write(data)


def test_a_large_value_reaches_the_file_in_writes_of_at_most_a_piece(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One huge write makes Linux fill the page cache with 2 MiB folios, several times
    slower to allocate on a VM than the pieces' (bench/README.md, the payload section)."""
    monkeypatch.setattr(chunks, "WRITE_PIECE", 1000)
    value = random.Random(5).randbytes(50_000)
    fh = _RecordingFile()
    dump_envelope(fh, value, kind="call", job_id="job-1", signing_key=None, storage="file:///s")
    assert max(fh.sizes) <= 1000 and sum(fh.sizes) == len(fh.getvalue())
    assert pickle.loads(fh.getvalue()) == value  # the body leads the envelope


def test_the_reader_returns_exactly_the_body_for_any_mix_of_reads(tmp_path: Path) -> None:
    body = random.Random(1).randbytes(9 * 64 + 17).replace(b"\n", b"-")
    body = body[:100] + b"\n" + body[101:300] + b"\n" + body[301:]
    path = tmp_path / "body"
    path.write_bytes(body + b"header after the body")
    for seed in range(20):
        rng = random.Random(seed)
        with open(path, "rb") as fh:
            reader = VerifiedReader(
                fh,
                size=len(body),
                digests=_expected(body, 64),
                chunk=64,
                where="body",
                algorithm=ALGORITHM["algorithm"],
            )
            got = bytearray()
            while len(got) < len(body):
                how = rng.choice(["read", "readinto", "readline"])
                n = rng.choice([1, 9, 63, 64, 65, 200, 1000])
                if how == "read":
                    got += reader.read(n)
                elif how == "readline":
                    got += reader.readline()
                else:
                    buf = bytearray(n)
                    got += buf[: reader.readinto(buf)]
            assert bytes(got) == body and reader.read() == b""


def _load(storage_uri: str, *, key: str = "e.pkl") -> Any:
    return load_envelope(
        open_storage(storage_uri), key, kind="call", job_id="job-1", signing_key=None
    )[1]


def test_large_values_round_trip_across_many_chunks(storage_uri: str, small_chunks: None) -> None:
    value = {
        "bytes": random.Random(2).randbytes(20 * SMALL + 11),
        "bytearray": bytearray(random.Random(3).randbytes(7 * SMALL)),
        "list": list(range(5000)),
        "text": "é" * 30000,
    }
    write_envelope(storage_uri, value)
    loaded = _load(storage_uri)
    assert loaded == value
    assert type(loaded["bytes"]) is bytes and type(loaded["bytearray"]) is bytearray


@pytest.mark.parametrize(
    "where",
    [
        pytest.param(
            lambda body, marker: body.index(b"y" * 100) + 5 * SMALL, id="in-a-large-value"
        ),
        pytest.param(lambda body, marker: body.index(b"unpickled-marker"), id="in-the-opcodes"),
    ],
)
def test_a_tampered_chunk_is_refused_before_pickle_sees_it(
    storage_uri: str, small_chunks: None, tmp_path: Path, where: Any
) -> None:
    marker = str(tmp_path / "unpickled-marker")
    path = write_envelope(storage_uri, [b"y" * (20 * SMALL), Marker(marker)])
    data = bytearray(path.read_bytes())
    at = where(bytes(data), marker)
    data[at] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(kc.PayloadIntegrityError, match=r"(sha256|blake3) check \(chunk \d+\)"):
        _load(storage_uri)
    assert not list(tmp_path.glob("unpickled-marke*"))


def _format_1_envelope(
    path: Path, obj: object, *, job_id: str, storage: str, key: str | None
) -> None:
    """An envelope as kinetic-workflows 0.1.0 wrote it: the body hashed whole."""
    body = cloudpickle.dumps(obj)
    header: dict[str, Any] = {
        "format": 1,
        "kind": "call",
        "job_id": job_id,
        "storage": storage,
        "sha256": hashlib.sha256(body).hexdigest(),
        "body_len": len(body),
        "success": None,
        "python": "3.11",
        "cloudpickle": cloudpickle.__version__,
        "hmac": None,
    }
    if key:
        header["hmac"] = signing.mac(key, {k: header[k] for k in _SIGNED})
    raw = json.dumps(header).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(body + raw + struct.pack(">Q", len(raw)) + MAGIC)


@pytest.mark.parametrize("key", [None, "k1"])
def test_a_format_1_envelope_is_still_read_and_checked(storage_uri: str, key: str | None) -> None:
    storage = open_storage(storage_uri)
    path = Path(storage_uri[7:], "old.pkl")
    value = {"weights": b"w" * (3 * SMALL)}
    _format_1_envelope(path, value, job_id="job-1", storage=storage.uri, key=key)
    _, loaded = load_envelope(storage, "old.pkl", kind="call", job_id="job-1", signing_key=key)
    assert loaded == value
    data = bytearray(path.read_bytes())
    data[100] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(kc.PayloadIntegrityError, match="sha256 check"):
        load_envelope(storage, "old.pkl", kind="call", job_id="job-1", signing_key=key)


def test_an_unknown_format_gets_a_clear_error(storage_uri: str, envelope_format: int) -> None:
    path = write_envelope(storage_uri, {"x": 1})
    written = f'"format": {envelope_format}'.encode()
    path.write_bytes(path.read_bytes().replace(written, b'"format": 9'))
    with pytest.raises(kc.PayloadIntegrityError, match=r"format 9.*reads formats 1, 2, 3.*same"):
        _load(storage_uri)


def test_a_forged_digest_list_is_refused(storage_uri: str) -> None:
    """Unsigned: changing a chunk and its listed digest still breaks the sha256 over the list."""
    path = write_envelope(storage_uri, {"x": 1})
    raw = path.read_bytes()
    body_len = raw.index(b'{"format"')
    old = _expected(raw[:body_len], chunks.CHUNK)[0]
    forged_body = raw[:body_len].replace(b"x", b"y")
    new = _expected(forged_body, chunks.CHUNK)[0]
    header = raw[body_len:].replace(old.encode(), new.encode())
    path.write_bytes(forged_body + header)
    with pytest.raises(kc.PayloadIntegrityError, match="sha256"):
        _load(storage_uri)
    algorithm = ALGORITHM["algorithm"]
    assert digest_of(chunks.CHUNK, [old], algorithm) != digest_of(chunks.CHUNK, [new], algorithm)


def test_rebinding_copies_a_multi_chunk_body_verified(storage_uri: str, small_chunks: None) -> None:
    value = random.Random(5).randbytes(9 * SMALL + 3)
    write_envelope(storage_uri, value)
    storage = open_storage(storage_uri)
    with storage.open_write("f.pkl") as fh:
        rebind_envelope(
            storage, "e.pkl", fh, kind="call", job_id="job-1", new_job_id="job-2", signing_key=None
        )
    _, loaded = load_envelope(storage, "f.pkl", kind="call", job_id="job-2", signing_key=None)
    assert loaded == value
