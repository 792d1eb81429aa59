"""``result()`` on storage that became read-only (issue 25, case 11).

A value that was read is the caller's: a cleanup that fails after it (read-only storage,
reader-only credentials) is logged, keeps the job's files, and never costs the result.
Real detached jobs on the local backend, real read-only storage (see ``readonly.py``).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

import kinetic_core as kc
from tests.core import jobfns
from tests.core.readonly import read_only


def _store(storage_uri: str) -> Path:
    return Path(storage_uri.removeprefix("file://"))


def test_result_on_read_only_storage_returns_the_value_and_keeps_the_files(
    storage_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    job = kc.submit(jobfns.add, (40, 2))
    assert job.wait(timeout=60).status is kc.JobStatus.SUCCEEDED
    with read_only(_store(storage_uri)), caplog.at_level(logging.WARNING):
        assert job.result(timeout=60) == 42
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(job.job_id in m and "is kept" in m for m in warnings), warnings
    # Nothing was deleted: once storage is writable again the result is still there,
    # and the default cleanup now runs.
    assert job.result(timeout=60) == 42
    with pytest.raises(kc.ResultNotAvailable):
        job.result(timeout=60)


def test_aresult_on_read_only_storage_returns_the_value(
    storage_uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    job = kc.submit(jobfns.add, (1, 2))
    job.wait(timeout=60)
    with read_only(_store(storage_uri)), caplog.at_level(logging.WARNING):
        assert asyncio.run(job.aresult(timeout=60)) == 3
    assert any(job.job_id in r.getMessage() for r in caplog.records)
