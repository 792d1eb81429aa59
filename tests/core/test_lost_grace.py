"""``lost_grace``: how long a job its backend does not show may stay unseen before it
reads FAILED ``Lost`` (default 120 s), on the real local backend."""

from __future__ import annotations

import os
import time

import pytest

import kinetic_core as kc
from kinetic_core.jobs import JobHandle


def _never_launched(storage_uri: str, **options: object) -> JobHandle:
    """A job whose handle was made 5 s ago and that its backend never saw: its submitter
    died between creating the handle and launching it."""
    target = kc.Target(storage=storage_uri, **options).resolve()  # type: ignore[arg-type]
    return JobHandle(
        job_id=f"vanished-{os.urandom(4).hex()}",
        storage=storage_uri,
        target=target.to_dict(),
        name="vanished",
        created_at=time.time() - 5,
    )


def test_default_grace_keeps_a_young_unseen_job_submitting(storage_uri: str) -> None:
    state = _never_launched(storage_uri).state()
    assert (state.status, state.reason) == (kc.JobStatus.PENDING, "Submitting"), state


def test_a_short_lost_grace_reads_the_unseen_job_lost_sooner(storage_uri: str) -> None:
    job = _never_launched(storage_uri, lost_grace=1)
    assert job.target["lost_grace"] == 1
    state = job.state()
    assert (state.status, state.reason) == (kc.JobStatus.FAILED, "Lost"), state
    assert job.state().status is kc.JobStatus.FAILED  # sealed: terminal for every reader


def test_lost_grace_from_the_environment(storage_uri: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KINETIC_LOST_GRACE", "1.5")
    job = _never_launched(storage_uri)
    assert job.target["lost_grace"] == 1.5
    assert job.state().reason == "Lost"


@pytest.mark.parametrize("bad", [0, -3, "soon", True])
def test_bad_lost_grace_is_refused(storage_uri: str, bad: object) -> None:
    with pytest.raises(kc.ConfigError, match="lost_grace must be a positive number of seconds"):
        kc.Target(lost_grace=bad).resolve()  # type: ignore[arg-type]


def test_bad_lost_grace_in_the_environment_is_refused(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KINETIC_LOST_GRACE", "two minutes")
    with pytest.raises(kc.ConfigError, match="KINETIC_LOST_GRACE"):
        kc.Target().resolve()
