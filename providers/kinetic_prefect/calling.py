"""Calling a kinetic task from sync or async code: awaitable in a loop, a value outside one."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from prefect.utilities.asyncutils import run_coro_as_sync


def in_async_context() -> bool:
    """Whether an event loop runs in this thread (the caller can await)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def for_caller(result: Any) -> Any:
    """A Prefect task call's result as the caller can use it: a coroutine is run to its
    value when no event loop runs here, returned as-is (to await) otherwise."""
    if inspect.iscoroutine(result) and not in_async_context():
        return run_coro_as_sync(result)
    return result
