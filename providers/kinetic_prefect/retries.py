"""Which failures a Prefect retry may retry: never configuration or serialization errors."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from prefect import Task
from prefect.states import State

import kinetic_core as kc

# Errors that another attempt cannot fix: Prefect does not retry them.
NOT_RETRYABLE: tuple[type[BaseException], ...] = (kc.ConfigError, kc.SerializationError)


def compose_retry_condition(
    user: Callable[..., Any] | None,
) -> Callable[[Task[..., Any], Any, State[Any]], Any]:
    """Never retry configuration or serialization errors; otherwise defer to ``user``."""

    def not_retryable(state: State[Any]) -> bool:
        return isinstance(state.data, NOT_RETRYABLE)

    if user is not None and inspect.iscoroutinefunction(user):

        async def kinetic_retry_condition_async(
            task: Task[..., Any], task_run: Any, state: State[Any]
        ) -> bool:
            return not not_retryable(state) and bool(await user(task, task_run, state))

        return kinetic_retry_condition_async

    def kinetic_retry_condition(task: Task[..., Any], task_run: Any, state: State[Any]) -> bool:
        if not_retryable(state):
            return False
        return True if user is None else bool(user(task, task_run, state))

    return kinetic_retry_condition
