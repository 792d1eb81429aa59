"""Waits that know no job: the adaptive tick schedule, a wait's deadline, the async twin of
a blocking call. ``control/polling.py`` builds every job wait on these; code below the
control layer (a ``Data`` lease, say) waits with them directly.

Ticks are adaptive: the first come fast (5 ms, growing 1.3x) so short waits end with low
latency, then settle at the caller's interval so long waits cost little.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

from kinetic_core.errors import WaitTimeout

P = ParamSpec("P")
T = TypeVar("T")

FIRST_DELAY = 0.005
GROWTH = 1.3


def delays(interval: float, first: float = FIRST_DELAY) -> Iterator[float]:
    delay = min(first, interval)
    while True:
        yield delay
        delay = min(delay * GROWTH, interval)


@dataclass
class Deadline:
    """The timeout of one wait, shared by the sync and async tick loops."""

    timeout: float | None
    describe: Callable[[], str]
    at: float | None = None

    def __post_init__(self) -> None:
        if self.timeout is not None:
            self.at = time.monotonic() + self.timeout

    def clip(self, delay: float) -> float:
        """``delay``, shortened to the time left; WaitTimeout when none is left."""
        if self.at is None:
            return delay
        remaining = self.at - time.monotonic()
        if remaining <= 0:
            raise WaitTimeout(f"Timed out after {self.timeout:g}s: {self.describe()}")
        return min(delay, remaining)


def ticks(
    *,
    interval: float,
    timeout: float | None,
    describe: Callable[[], str],
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[None]:
    """THE sync wait loop. Yields; the caller checks and ``break``s when done.

    Between ticks it sleeps adaptively (``sleep`` may return early); past ``timeout`` it
    raises WaitTimeout using ``describe()`` to say what was still unfinished.
    """
    deadline = Deadline(timeout, describe)
    for delay in delays(interval):
        yield
        sleep(deadline.clip(delay))


async def aticks(
    *,
    interval: float,
    timeout: float | None,
    describe: Callable[[], str],
    first: float = FIRST_DELAY,
    wake: asyncio.Future[Any] | None = None,
) -> AsyncIterator[None]:
    """Async twin of ``ticks``: the same schedule and WaitTimeout, sleeping in the event
    loop. A ``wake`` future that completes cuts every later sleep short."""
    deadline = Deadline(timeout, describe)
    for delay in delays(interval, first):
        yield
        delay = deadline.clip(delay)
        if wake is not None and not wake.done():
            await asyncio.wait({wake}, timeout=delay)
        elif wake is None:
            await asyncio.sleep(delay)


def in_thread(fn: Callable[P, T]) -> Callable[P, Coroutine[Any, Any, T]]:
    """The async twin of a blocking call: the same code, run in a worker thread.

    Used for twins that do one round of storage/backend I/O (``acancel``, ``astate``...);
    twins that wait go through the shared poller or ``aticks`` instead.
    """

    @functools.wraps(fn)
    async def twin(*args: P.args, **kwargs: P.kwargs) -> T:
        return await asyncio.to_thread(fn, *args, **kwargs)

    return twin
