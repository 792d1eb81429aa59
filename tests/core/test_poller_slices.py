"""A wave of jobs ending at once reaches a caller's loop in slices: each outcome resumes
a waiter (a trigger firing its event), and thousands in one loop iteration stalled a
triggerer for seconds (issue 23)."""

from __future__ import annotations

import asyncio

import pytest

from kinetic_core.control import polling


def test_a_wave_of_outcomes_reaches_the_caller_loop_in_slices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(polling, "DELIVER_SLICE", 5, raising=False)

    async def value(i: int) -> int:
        return i

    async def main() -> tuple[list[int], list[int]]:
        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(value(i)) for i in range(20)]
        await asyncio.gather(*tasks)
        waiting = [loop.create_future() for _ in tasks]
        box = polling._Outbox.of(loop)
        for done, task in zip(waiting, tasks, strict=True):
            box.put(done, task)  # as the background loop hands them over, in one burst
        seen = []
        while not all(f.done() for f in waiting):
            seen.append(sum(f.done() for f in waiting))
            await asyncio.sleep(0)  # one loop iteration
        return seen, [f.result() for f in waiting]

    seen, results = asyncio.run(main())
    assert results == list(range(20))
    # The loop ran between slices: it saw the wave part-delivered, a slice at a time.
    assert {5, 10, 15} <= set(seen), seen
