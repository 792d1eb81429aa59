"""Shared fixtures: every test gets its own storage root (and so its own local backend dir)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/: helper modules

from gcs_emulator import BUCKET, EmulatorServer, GCSEmulator

from tests.cleanup import kill_leftovers

# Supervisors escalate SIGTERM to SIGKILL after this grace; keep cancellation tests quick.
os.environ.setdefault("KINETIC_KILL_GRACE", "2")


@pytest.fixture
def storage_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A fresh file:// storage root, also set as KINETIC_STORAGE for code that resolves it."""
    uri = f"file://{tmp_path / 'store'}"
    monkeypatch.setenv("KINETIC_STORAGE", uri)
    monkeypatch.delenv("KINETIC_SIGNING_KEY", raising=False)
    monkeypatch.delenv("KINETIC_BACKEND", raising=False)
    yield uri
    kill_leftovers(tmp_path / "store")


# ---- GCS emulator ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[GCSEmulator]:
    """An in-memory GCS emulator on 127.0.0.1 (free port) with bucket ``kinetic-test``.

    It enforces generation preconditions (see tests/gcs_emulator.py), so create-only is
    really tested. STORAGE_EMULATOR_HOST is set in os.environ, so job processes launched
    by the local backend inherit it and reach the same emulator.
    """
    server = EmulatorServer().start()
    server.create_bucket(BUCKET)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STORAGE_EMULATOR_HOST", server.endpoint)
        try:
            yield GCSEmulator(server)
        finally:
            server.stop()
