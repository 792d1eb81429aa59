"""Fixtures for core tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the helper modules

from gcs_emulator import BUCKET, EmulatorServer, GCSEmulator

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
