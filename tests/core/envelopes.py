"""Writing test envelopes, and a value whose unpickling shows (the envelope tests share them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kinetic_core.records.envelope import dump_envelope
from kinetic_core.storage import open_storage


class Marker:
    """Unpickling this creates a file: the tests prove when that happens."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (Path(self.path),))


def write_envelope(
    storage_uri: str,
    obj: object,
    *,
    key: str = "e.pkl",
    job_id: str = "job-1",
    signing_key: str | None = None,
) -> Path:
    """A call envelope of ``obj`` at ``key`` in a file:// storage; its path."""
    storage = open_storage(storage_uri)
    with storage.open_write(key) as fh:
        dump_envelope(
            fh, obj, kind="call", job_id=job_id, signing_key=signing_key, storage=storage.uri
        )
    return Path(storage_uri[len("file://") :], key)
