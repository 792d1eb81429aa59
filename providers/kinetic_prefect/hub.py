"""One background event loop per process where every Kinetic wait of this process lives.

Prefect runs a task in whatever loop is at hand: the flow's loop for ``await task()``,
a fresh ``asyncio.run`` per worker thread for ``.submit()``/``.map()``, Prefect's
run-sync loop for sync flows. The core's shared poller is per event loop, so waiting
in those loops would cost one backend poll per loop. Waiting here instead means all
Kinetic tasks of a process, however Prefect launched them, share one bulk poll per
interval.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

import kinetic_core as kc

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_pid: int | None = None


def hub_loop() -> asyncio.AbstractEventLoop:
    """The process's hub loop, started on first use (and again after a fork)."""
    global _loop, _pid
    with _lock:
        if _loop is None or _pid != os.getpid() or _loop.is_closed():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=loop.run_forever, name="kinetic-prefect-hub", daemon=True
            )
            thread.start()
            _loop, _pid = loop, os.getpid()
        return _loop


def submit_to_hub(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Run ``coro`` on the hub loop; cancelling the returned future cancels it there."""
    return asyncio.run_coroutine_threadsafe(coro, hub_loop())


async def in_hub(coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` on the hub loop from any other loop (cancellation propagates)."""
    return await asyncio.wrap_future(submit_to_hub(coro))


def hub_poller() -> kc.SharedPoller:
    """The core shared poller that all Kinetic waits of this process go through.

    ``hub_poller().polls`` counts bulk status polls (what tests and benchmarks count).
    """

    async def get() -> kc.SharedPoller:
        return kc.shared_poller()

    return submit_to_hub(get()).result()
