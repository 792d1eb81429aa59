"""Envelope format 3: BLAKE3 chunk digests where the ``blake3`` package (the ``fast`` extra)
is installed, format 2 (sha256) where it is not; both read; a reader without ``blake3``
refuses a format 3 envelope with a typed error that says what to install."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from blake3 import blake3

import kinetic_core as kc
from kinetic_core.records import chunks
from kinetic_core.records.envelope import MAGIC, load_envelope, read_summary
from kinetic_core.storage import open_storage
from tests.core import jobfns
from tests.core.envelopes import Marker, write_envelope
from tests.core.formats import without_blake3

SMALL = 4096


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunks, "CHUNK", SMALL)


def _header(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    length = int.from_bytes(raw[-len(MAGIC) - 8 : -len(MAGIC)], "big")
    return json.loads(raw[-len(MAGIC) - 8 - length : -len(MAGIC) - 8])


def _load(storage_uri: str, signing_key: str | None = None) -> object:
    return load_envelope(
        open_storage(storage_uri), "e.pkl", kind="call", job_id="job-1", signing_key=signing_key
    )[1]


@pytest.mark.parametrize("key", [None, "k1"])
def test_format_3_is_written_with_blake3_digests_and_round_trips(
    storage_uri: str, small_chunks: None, key: str | None
) -> None:
    value = {"weights": bytes(range(256)) * (5 * SMALL // 256) + b"tail", "n": 7}
    path = write_envelope(storage_uri, value, signing_key=key)
    header = _header(path)
    body = path.read_bytes()[: int(header["body_len"])]
    assert header["format"] == 3
    assert header["digests"] == [
        blake3(body[i : i + SMALL]).hexdigest() for i in range(0, len(body), SMALL)
    ]
    assert header["sha256"] == chunks.digest_of(SMALL, header["digests"], chunks.BLAKE3)
    assert _load(storage_uri, key) == value


def test_a_tampered_format_3_chunk_is_refused_before_pickle_sees_it(
    storage_uri: str, small_chunks: None, tmp_path: Path
) -> None:
    marker = str(tmp_path / "unpickled-marker")
    path = write_envelope(storage_uri, [b"z" * (6 * SMALL), Marker(marker)])
    data = bytearray(path.read_bytes())
    data[data.index(b"unpickled-marker")] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(kc.PayloadIntegrityError, match=r"blake3 check \(chunk \d+\)"):
        _load(storage_uri)
    assert not list(tmp_path.glob("unpickled-marke*"))


@pytest.mark.parametrize(("key", "match"), [(None, "sha256 check"), ("k1", "invalid signature")])
def test_relabelling_a_format_3_envelope_as_format_2_is_refused(
    storage_uri: str, key: str | None, match: str
) -> None:
    """The digest list is bound to its algorithm: the same BLAKE3 digests read as sha256
    ones fail the list's digest (unsigned) or the signature (the format is signed)."""
    path = write_envelope(storage_uri, {"x": 1}, signing_key=key)
    path.write_bytes(path.read_bytes().replace(b'"format": 3', b'"format": 2'))
    with pytest.raises(kc.PayloadIntegrityError, match=match):
        _load(storage_uri, key)


@pytest.mark.parametrize("key", [None, "k1"])
def test_a_format_2_envelope_is_written_without_blake3_and_read_with_it(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch, key: str | None
) -> None:
    with monkeypatch.context() as absent:
        without_blake3(absent)
        path = write_envelope(storage_uri, {"old": b"o" * 100}, signing_key=key)
    assert _header(path)["format"] == 2
    assert chunks.blake3_available()
    assert _load(storage_uri, key) == {"old": b"o" * 100}


def test_a_reader_without_blake3_refuses_format_3_saying_what_to_install(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    marker = str(tmp_path / "unpickled-marker")
    write_envelope(storage_uri, Marker(marker))
    without_blake3(monkeypatch)
    with pytest.raises(kc.PayloadFormatUnsupported, match=r"format 3.*kinetic-workflows\[fast\]"):
        _load(storage_uri)
    assert issubclass(kc.PayloadFormatUnsupported, kc.PayloadIntegrityError)
    assert not list(tmp_path.glob("unpickled-marke*"))
    assert read_summary(open_storage(storage_uri), "e.pkl")["format"] == 3  # header: readable


def test_a_runner_without_blake3_fails_the_job_saying_what_to_install(
    storage_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A submitter with the fast extra, a job environment without it (a runner image built
    without the extra): the job fails in its load phase with the typed error, before its
    function ran, and its result (format 2, written by that runner) reads back here."""
    hide = tmp_path / "no-blake3"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['blake3'] = None\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(hide), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("KINETIC_LOCAL_ZYGOTE", "0")  # a fresh interpreter runs sitecustomize
    marker = tmp_path / "ran"
    job = kc.submit(jobfns.write_marker, (str(marker),))
    with pytest.raises(kc.PayloadFormatUnsupported, match=r"kinetic-workflows\[fast\]"):
        job.result(timeout=120)
    assert job.state().status is kc.JobStatus.FAILED
    assert not marker.exists()
