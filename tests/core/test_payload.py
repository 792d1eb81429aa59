"""Envelopes are verified before anything is unpickled."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import cloudpickle
import pytest

import kinetic_core as kc
from kinetic_core.records.envelope import load_envelope, skew_note
from kinetic_core.storage import open_storage
from kinetic_core.storage.local import LocalStorage
from tests.core import jobfns
from tests.core.envelopes import Marker, write_envelope


class Boom:
    """Unpickling this would run code: the tests prove it never happens."""

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (exec, ("raise SystemExit('unpickled!')",))


def test_round_trip_signed(storage_uri: str) -> None:
    write_envelope(storage_uri, {"x": 1}, signing_key="k1")
    header, body = load_envelope(
        open_storage(storage_uri), "e.pkl", kind="call", job_id="job-1", signing_key="k1"
    )
    assert body == {"x": 1} and header["hmac"]


@pytest.mark.parametrize(
    ("writer_key", "reader_key", "match"),
    [
        (None, "k1", "unsigned but a signing key is configured"),
        ("k1", "k2", "invalid signature"),
        ("k1", None, "signed, but no signing key is configured"),
    ],
)
def test_signature_mismatch_refused_before_unpickling(
    storage_uri: str, writer_key: str | None, reader_key: str | None, match: str
) -> None:
    write_envelope(storage_uri, Boom(), signing_key=writer_key)
    with pytest.raises(kc.PayloadIntegrityError, match=match):
        load_envelope(
            open_storage(storage_uri), "e.pkl", kind="call", job_id="job-1", signing_key=reader_key
        )


def test_tampered_body_fails_checksum(storage_uri: str) -> None:
    path = write_envelope(storage_uri, {"weights": list(range(100))})
    data = bytearray(path.read_bytes())
    data[20] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(kc.PayloadIntegrityError, match=r"sha256|blake3"):
        load_envelope(
            open_storage(storage_uri), "e.pkl", kind="call", job_id="job-1", signing_key=None
        )


def test_an_envelope_rewritten_between_two_passes_is_not_unpickled(
    storage_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the reader hashed the whole file, then read it again to unpickle it, so a
    file rewritten in place between the two passes was unpickled unchecked. Now every
    byte pickle reads is a byte that was checked (one pass)."""
    # Larger than a read buffer: a second pass must go back to the file.
    path = write_envelope(storage_uri, [Marker(str(tmp_path / "unpickled-GOOD")), b"z" * (1 << 20)])
    evil = path.read_bytes().replace(b"GOOD", b"EVIL")

    class RewrittenOnRewind(io.BufferedReader):
        """Rewrites its file in place when a reader rewinds to the start a second time."""

        rewinds = 0

        def seek(self, offset: int, whence: int = 0) -> int:
            if (offset, whence) == (0, 0):
                RewrittenOnRewind.rewinds += 1
                if RewrittenOnRewind.rewinds == 2:
                    with open(path, "r+b") as fh:  # same inode: the open file sees it
                        fh.write(evil)
            return super().seek(offset, whence)

    @contextlib.contextmanager
    def open_read(self: LocalStorage, key: str) -> Iterator[BinaryIO]:
        with RewrittenOnRewind(io.FileIO(self.path(key))) as fh:
            yield fh  # type: ignore[misc]

    monkeypatch.setattr(LocalStorage, "open_read", open_read)
    load_envelope(open_storage(storage_uri), "e.pkl", kind="call", job_id="job-1", signing_key=None)
    assert not (tmp_path / "unpickled-EVIL").exists()
    assert (tmp_path / "unpickled-GOOD").exists()


def test_envelope_copied_from_another_job_is_refused(storage_uri: str) -> None:
    write_envelope(storage_uri, {"x": 1}, signing_key="k1", job_id="other-job")
    with pytest.raises(kc.PayloadIntegrityError, match="copied from another job"):
        load_envelope(
            open_storage(storage_uri), "e.pkl", kind="call", job_id="job-1", signing_key="k1"
        )


@pytest.mark.parametrize("content", [b"", b"garbage", b"\x80\x05K\x01." + b"x" * 40])
def test_corrupt_result_file(storage_uri: str, content: bytes) -> None:
    job = kc.submit(jobfns.add, (1, 2))
    job.wait(timeout=60)
    Path(storage_uri[7:], "jobs", job.job_id, "result.pkl").write_bytes(content)
    with pytest.raises(kc.PayloadIntegrityError, match=r"corrupt|truncated"):
        job.result(timeout=10)


def test_the_job_lets_its_arguments_go_before_its_result_is_written(storage_uri: str) -> None:
    """Regression: the runner held the call (a 1 GiB argument, say) while it pickled and
    wrote the result, so a job whose value is new data held both during the store."""
    assert kc.submit(jobfns.watch_argument, (jobfns.Weighty(),)).result(timeout=60) is False


def test_signed_job_end_to_end_and_unsigned_payload_refused_by_runner(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KINETIC_SIGNING_KEY", "key-a")
    assert kc.submit(jobfns.add, (2, 2)).result(timeout=60) == 4
    # A payload planted without the key: the runner (which has the key) refuses to load it.
    job_id = "planted-job"
    write_envelope(
        storage_uri,
        {"fn": Boom(), "args": (), "kwargs": {}},
        key=f"jobs/{job_id}/payload.pkl",
        job_id=job_id,
    )
    env = {**os.environ, "KINETIC_SIGNING_KEY": "key-a"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kinetic_core.runtime.runner",
            "--storage",
            storage_uri,
            "--job-id",
            job_id,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # Its stdout is a pipe, not a file: the runner keeps its log in storage and, as in a
    # pod's log, its stderr reaches stdout.
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "unpickled!" not in output
    assert "unsigned but a signing key is configured" in output
    _, body = load_envelope(
        open_storage(storage_uri),
        f"jobs/{job_id}/result.pkl",
        kind="result",
        job_id=job_id,
        signing_key="key-a",
    )
    assert body["phase"] == "load" and body["exc_type"].endswith("PayloadIntegrityError")


def test_version_skew_is_explained() -> None:
    note = skew_note({"python": "3.9", "cloudpickle": "1.0"})
    assert "Python 3.9" in note and "cloudpickle 1.0" in note and "same Python minor" in note
    assert skew_note({}) == ""


def test_a_function_pickled_by_value_keeps_the_file_name_of_its_code() -> None:
    """cloudpickle 3.1.3 writes ``<dynamic-code>`` as the file of by-value code, so remote
    tracebacks lost the user's file and source lines (the Airflow 3.0 suite's remote-
    traceback test failed on it); the envelope's pickler keeps the real file name."""
    import io
    import pickle

    from kinetic_core.records.envelope import _Pickler
    from tests.core import jobfns

    cloudpickle.register_pickle_by_value(jobfns)
    try:
        buffer = io.BytesIO()
        _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(jobfns.fail)
    finally:
        cloudpickle.unregister_pickle_by_value(jobfns)
    loaded = pickle.loads(buffer.getvalue())
    assert loaded is not jobfns.fail  # by value: rebuilt from its code
    assert loaded.__code__.co_filename == jobfns.fail.__code__.co_filename
