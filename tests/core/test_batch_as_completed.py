"""``BatchHandle.as_completed`` / ``aas_completed`` (kinetic's names) and ``tags`` on real
local batches: children gated on files finish in an order the test chooses, unlike their
input order, so completion order is asserted without any timing assumption."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import kinetic_core as kc
from tests.core import batch_helpers as h


def _gated_batch(tmp_path: Path, **options: object) -> tuple[kc.BatchHandle, list[Path]]:
    """Three children: 0 and 1 wait for their gate, 2 returns at once."""
    gates = [tmp_path / "gate-0", tmp_path / "gate-1"]
    inputs = [
        {"value": 0, "gate": str(gates[0])},
        {"value": 1, "gate": str(gates[1])},
        {"value": 2},
    ]
    return kc.submit_map(h.gated, inputs, max_concurrency=3, **options), gates  # type: ignore[arg-type]


def _index(job: kc.JobHandle) -> int:
    return int(job.tags["kinetic/index"])


@pytest.mark.timeout(120)
def test_as_completed_yields_each_child_once_in_completion_order(
    storage_uri: str, tmp_path: Path
) -> None:
    batch, gates = _gated_batch(tmp_path)
    order = []
    for job in batch.as_completed(timeout=90, poll_interval=0.2):
        order.append(_index(job))
        assert job.status() is kc.JobStatus.SUCCEEDED, "yielded only once final"
        if len(order) <= len(gates):  # let the next gated child finish: 2, then 0, then 1
            gates[len(order) - 1].touch()
    assert order == [2, 0, 1]


@pytest.mark.timeout(120)
def test_aas_completed_yields_in_completion_order(storage_uri: str, tmp_path: Path) -> None:
    batch, gates = _gated_batch(tmp_path)

    async def drain() -> list[int]:
        order = []
        async for job in batch.aas_completed(timeout=90, poll_interval=0.2):
            order.append(_index(job))
            if len(order) <= len(gates):
                gates[len(order) - 1].touch()
        return order

    assert asyncio.run(drain()) == [2, 0, 1]
    assert [j.result(timeout=30) for j in batch.jobs if j is not None] == [0, 1, 2]


@pytest.mark.timeout(120)
def test_as_completed_timeout_names_the_children_still_running(
    storage_uri: str, tmp_path: Path
) -> None:
    batch, gates = _gated_batch(tmp_path)
    seen = []
    with pytest.raises(kc.WaitTimeout) as caught:
        for job in batch.as_completed(timeout=3, poll_interval=0.2):
            seen.append(_index(job))
    assert seen == [2]
    message = str(caught.value)
    assert "still running: child 0" in message and "child 1" in message, message
    assert "child 2" not in message, message
    for gate in gates:
        gate.touch()
    assert batch.wait(timeout=60) == [kc.ChildStatus.SUCCEEDED] * 3


@pytest.mark.parametrize("bad", [0, -1, "fast", True])
def test_as_completed_refuses_a_bad_poll_interval(storage_uri: str, bad: object) -> None:
    batch = kc.submit_map(h.gated, [{"value": 0}])
    with pytest.raises(kc.ConfigError, match="poll_interval must be a positive number"):
        next(batch.as_completed(timeout=30, poll_interval=bad))  # type: ignore[arg-type]
    assert batch.results(timeout=60) == [0]


def test_batch_tags_are_the_tags_it_was_submitted_with(storage_uri: str) -> None:
    batch = kc.submit_map(
        h.gated, [{"value": 0}], tags={"team": "ml"}, target=kc.Target(tags={"env": "dev"})
    )
    assert batch.tags == {"env": "dev", "team": "ml"}
    again = kc.attach_batch(batch.group_id)
    assert again.tags == {"env": "dev", "team": "ml"}
    assert batch.results(timeout=60) == [0]
