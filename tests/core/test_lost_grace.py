"""``lost_grace``: how long a job its backend does not show may stay unseen before it
reads FAILED ``Lost`` (default 120 s), on the real local backend."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.backends import BackendState, PlainKind, get_backend
from kinetic_core.control.resolution import resolve_states
from kinetic_core.jobs.handle import JobHandle
from kinetic_core.util import registry


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


# ---- a backend applies its target's grace: one instance per grace --------------------------


class GraceBackend:
    """Reports the grace it was made with; every instance has one scope, as the instances
    of one Kubernetes namespace do."""

    name = "graced"
    scope = "graced"

    def __init__(self, target: kc.Target) -> None:
        self.grace = target.lost_grace

    def poll(self, job_ids: list[str]) -> dict[str, BackendState]:
        return {j: BackendState("running", message=f"grace {self.grace}") for j in job_ids}


class GraceKind(PlainKind):
    def cache_key(self, target: kc.Target) -> tuple[object, ...]:
        return (target.storage, target.lost_grace)


KIND = GraceKind(GraceBackend)


def test_each_job_is_polled_by_the_backend_of_its_own_grace(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Jobs of one scope whose targets differ in an option their backend applies (the
    Kubernetes backend applies lost_grace to a lost node's pods) are polled each by its
    own backend, in one status resolution."""
    monkeypatch.setitem(registry.BACKENDS, "graced", f"{__name__}:KIND")
    jobs = [
        JobHandle(
            job_id=f"graced-{grace}",
            storage=storage_uri,
            target={"backend": "graced", "storage": storage_uri, "lost_grace": grace},
            created_at=time.time(),
        )
        for grace in (5, 7)
    ]
    states = resolve_states(jobs)
    assert [s.message for s in states] == ["grace 5", "grace 7"]


def test_kubernetes_backends_differ_by_lost_grace(tmp_path: Path) -> None:
    """No cluster is asked: the backend is made, not used."""
    base = {"backend": "kubernetes", "storage": f"file://{tmp_path}", "namespace": "ml"}
    short = get_backend(kc.Target(**base, lost_grace=5).resolve())
    default = get_backend(kc.Target(**base).resolve())
    assert short is not default
    assert (short.lost_grace, default.lost_grace) == (5, 120.0)  # type: ignore[attr-defined]
