"""A runner whose Python minor, cloudpickle or kinetic-workflows version differs from the
submitter's ends the job with reason ``ImageMismatch`` before it unpickles anything.

On the local backend the runner is the submitter's own interpreter, so the submitter's
recorded versions are made to differ (the envelope header is what the runner compares).
"""

from __future__ import annotations

import cloudpickle
import pytest

import kinetic_core as kc
from kinetic_core.records import layout
from kinetic_core.storage import open_storage
from kinetic_core.util import version
from tests.core import jobfns


def test_a_cloudpickle_mismatch_ends_the_job_with_image_mismatch(
    storage_uri: str, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the runner unpickled the payload whatever the versions, and the job read
    SUCCEEDED (or failed later with reason Error and a skew note)."""
    ours = cloudpickle.__version__
    monkeypatch.setattr(cloudpickle, "__version__", "0.0.1")
    job = kc.submit(jobfns.add, (1, 2))
    monkeypatch.setattr(cloudpickle, "__version__", ours)
    state = job.wait(timeout=60)
    assert state.status is kc.JobStatus.FAILED
    assert state.reason == "ImageMismatch"
    assert "cloudpickle 0.0.1 (submitter)" in (state.message or "")
    with pytest.raises(kc.ImageMismatch) as caught:
        job.result(timeout=60)
    text = str(caught.value)
    assert f"cloudpickle 0.0.1 (submitter) vs {ours} (runner)" in text
    assert "Dockerfile" in text and "requirements=" in text
    started = open_storage(storage_uri).exists(layout.job_file(job.job_id, layout.STARTED))
    assert started  # the runner started, checked, and stopped before the function


def test_a_kinetic_version_mismatch_names_both_versions(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(version, "__version__", "0.0.9")  # what envelopes record
    job = kc.submit(jobfns.add, (1, 2))
    monkeypatch.setattr(version, "__version__", "0.1.0")
    state = job.wait(timeout=60)
    assert state.reason == "ImageMismatch"
    assert "kinetic-workflows 0.0.9 (submitter) vs 0.1.0 (runner)" in (state.message or "")


def test_matching_versions_run_the_job(storage_uri: str) -> None:
    assert kc.submit(jobfns.add, (1, 2)).result(timeout=60) == 3
