"""One real Prefect API server (``prefect_test_harness``) for the whole session.

Settings must be in the environment before Prefect reads them, so they are set at
import time, before anything imports ``prefect``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

_HOME = tempfile.mkdtemp(prefix="kinetic-prefect-home-")
os.environ["PREFECT_HOME"] = _HOME
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ.setdefault("PREFECT_LOGGING_TO_API_BATCH_INTERVAL", "0.3")
os.environ["KINETIC_STORAGE"] = f"file://{_HOME}/kinetic-default"
os.environ["KINETIC_POLL_INTERVAL"] = "0.5"

import pytest  # noqa: E402
from prefect.testing.utilities import prefect_test_harness  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def prefect_server() -> Iterator[None]:
    # Generous: on a loaded 2-core machine the server has needed over 100 s to start.
    with prefect_test_harness(server_startup_timeout=300):
        yield


@pytest.fixture(autouse=True)
def kinetic_storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh storage root per test, so tests can count the jobs they created."""
    uri = f"file://{tmp_path}/kinetic"
    monkeypatch.setenv("KINETIC_STORAGE", uri)
    return uri
