"""Thousands of triggers starting at once take their first steps a share of each loop
iteration, in order, so the triggerer's loop never stalls for all of them (issue 23)."""

from __future__ import annotations

import asyncio

from kinetic_airflow import triggers


def test_triggers_starting_at_once_start_a_share_per_iteration_in_order() -> None:
    count = 3 * triggers.STARTS_PER_ITERATION + 7

    async def main() -> tuple[list[int], list[int]]:
        iteration = [0]
        started: list[int] = []
        per_iteration: dict[int, int] = {}

        async def trigger(i: int) -> None:
            await triggers._Turns.take()
            started.append(i)
            per_iteration[iteration[0]] = per_iteration.get(iteration[0], 0) + 1

        tasks = [asyncio.ensure_future(trigger(i)) for i in range(count)]
        tasks[60].cancel()  # cancelled while waiting for its turn: the others go on
        while not all(t.done() for t in tasks):
            await asyncio.sleep(0)
            iteration[0] += 1
        return started, list(per_iteration.values())

    started, shares = asyncio.run(main())
    assert started == [i for i in range(count) if i != 60]  # first come, first started
    assert max(shares) <= triggers.STARTS_PER_ITERATION, shares
    assert len(shares) >= 4, shares
