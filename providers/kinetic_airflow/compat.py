"""Airflow 3.0 to 3.3 differences, in one place: import what the running version has.

Everything is feature-detected (``ImportError`` / ``hasattr``), never parsed from a
version string. What a version lacks degrades as documented in ``docs/airflow.md``:

- ``airflow.sdk.exceptions`` has the task exceptions from 3.2 (earlier: ``airflow.exceptions``);
- ``airflow.sdk.BaseHook`` from 3.1 (3.0: ``airflow.hooks.base``), ``aget_connection`` from 3.1;
- trigger ``on_kill`` is called by the triggerer from 3.3 (``TRIGGER_ON_KILL``); before,
  a trigger that is cancelled asks the API for its task's state (``task_state``) instead;
- ``task_state_store`` is in the task context from 3.3 (before: the idempotency key alone).
"""

from __future__ import annotations

from typing import Any

from airflow.triggers.base import BaseTrigger

try:  # Airflow >= 3.2
    from airflow.sdk.exceptions import (
        AirflowException,
        AirflowFailException,
        AirflowNotFoundException,
        TaskDeferralTimeout,
        TaskDeferred,
    )
except ImportError:  # Airflow 3.0, 3.1
    from airflow.exceptions import (  # type: ignore[no-redef,attr-defined,unused-ignore]
        AirflowException,
        AirflowFailException,
        AirflowNotFoundException,
        TaskDeferralTimeout,
        TaskDeferred,
    )

try:  # Airflow >= 3.1
    from airflow.sdk import BaseHook
except ImportError:  # Airflow 3.0
    from airflow.hooks.base import (  # type: ignore[no-redef,attr-defined,unused-ignore]
        BaseHook,
    )

try:  # Airflow >= 3.1: masked in the task process and its supervisor
    from airflow.sdk.log import mask_secret
except ImportError:  # Airflow 3.0
    from airflow.sdk.execution_time.secrets_masker import (  # type: ignore[no-redef,unused-ignore]
        mask_secret,  # noqa: F401
    )

#: The triggerer calls ``BaseTrigger.on_kill`` when a user kills a deferred task (3.3+).
TRIGGER_ON_KILL: bool = "on_kill" in vars(BaseTrigger)

#: States of a deferred task that a user ended (marked, cleared, removed): its job is
#: cancelled. Any other state (deferred: a triggerer restart; scheduled: timeout or event)
#: leaves the job alone.
ENDED_BY_USER = frozenset(
    {"success", "failed", "skipped", "removed", "upstream_failed", "restarting", "none"}
)


async def aget_connection(hook: Any, conn_id: str) -> Any:
    """``hook.aget_connection`` (3.1+); on 3.0 the sync lookup in a worker thread, as
    Airflow 3.0 documents for triggers (its sync call cannot run on the event loop)."""
    if hasattr(hook, "aget_connection"):
        return await hook.aget_connection(conn_id)
    from asgiref.sync import sync_to_async

    return await sync_to_async(hook.get_connection)(conn_id)


async def task_state(ti: Any) -> str | None:
    """The current state of a trigger's task instance, asked through the triggerer's API
    client (``RuntimeTaskInstance.get_task_states``, as Airflow's own triggers do).

    Returns ``"none"`` for a task with no state (cleared) or gone; raises when it cannot ask.
    """
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance
    from asgiref.sync import sync_to_async

    states = await sync_to_async(RuntimeTaskInstance.get_task_states)(
        dag_id=ti.dag_id, task_ids=[ti.task_id], run_ids=[ti.run_id], map_index=ti.map_index
    )
    by_task = states.get(ti.run_id) or {}
    state = by_task.get(ti.task_id)
    if state is None and by_task:  # mapped tasks are keyed "task_id_map_index"
        state = by_task.get(f"{ti.task_id}_{ti.map_index}")
    return str(getattr(state, "value", state)).lower() if state is not None else "none"


__all__ = [
    "ENDED_BY_USER",
    "TRIGGER_ON_KILL",
    "AirflowException",
    "AirflowFailException",
    "AirflowNotFoundException",
    "BaseHook",
    "TaskDeferralTimeout",
    "TaskDeferred",
    "aget_connection",
    "task_state",
]
