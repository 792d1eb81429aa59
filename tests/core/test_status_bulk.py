"""Bulk status resolution resolves each distinct stored target once per call: a shared
poller's tick over thousands of jobs of one target must not rebuild the target and the
backend's cache key per job (issue 23: 5,000 triggers on one triggerer)."""

from __future__ import annotations

import dataclasses

import pytest

import kinetic_core as kc
from kinetic_core.backends import PlainKind
from kinetic_core.config.target import Target
from kinetic_core.control.resolution import resolve_states
from kinetic_core.util import registry
from tests.core import jobfns
from tests.core.scripted_backend import ScriptedBackend


class CountingKind(PlainKind):
    """The scripted backend, counting how often a target is resolved to its backend."""

    resolutions = 0

    def cache_key(self, target: Target) -> tuple[object, ...]:
        CountingKind.resolutions += 1
        return (target.storage, target.signing_key)


KIND = CountingKind(ScriptedBackend)


@pytest.fixture
def counted(storage_uri: str, monkeypatch: pytest.MonkeyPatch) -> type[CountingKind]:
    monkeypatch.setitem(registry.BACKENDS, "counted", f"{__name__}:KIND")
    ScriptedBackend.reset()
    return CountingKind


def test_one_resolution_per_distinct_target_and_key_per_bulk_call(
    counted: type[CountingKind],
) -> None:
    one = [kc.submit(jobfns.add, (i, 1), target={"backend": "counted"}) for i in range(12)]
    other = [
        kc.submit(jobfns.add, (i, 2), target={"backend": "counted", "poll_interval": 7})
        for i in range(3)
    ]
    keyed = [dataclasses.replace(h, signing_key="k" * 32) for h in one[:2]]
    counted.resolutions = 0
    states = resolve_states(one + other + keyed)
    assert [s.status for s in states] == [kc.JobStatus.RUNNING] * 17
    # Three distinct (stored target, signing key): not one resolution per job (17).
    assert counted.resolutions == 3
    counted.resolutions = 0
    resolve_states(one)  # each call resolves afresh: what the environment holds now counts
    assert counted.resolutions == 1
