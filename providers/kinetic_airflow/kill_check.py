"""Before Airflow 3.3: tell a user's kill of a deferred task from a triggerer restart.

Airflow 3.3+ calls ``BaseTrigger.on_kill`` when a user marks, clears or removes a deferred
task. Airflow 3.0 to 3.2 only cancel the trigger's coroutine, as they also do when a
triggerer stops or hands its triggers to another one. A cancelled kinetic trigger then
asks the API for its task instance's state: a state a user set (``ENDED_BY_USER``) means
the job is cancelled; ``deferred`` means a restart, and the job keeps running for the
triggerer that resumes it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kinetic_airflow.compat import ENDED_BY_USER, TRIGGER_ON_KILL, task_state

#: Seconds to wait for the task state (the triggerer may be shutting down).
STATE_TIMEOUT = 10.0


async def cancel_if_killed(trigger: Any) -> None:
    """Called when ``trigger.run()`` is cancelled: run ``trigger.on_kill()`` if a user
    ended the task, where the triggerer does not call it itself (before 3.3)."""
    if TRIGGER_ON_KILL or not trigger.cancel_on_kill:
        return
    ti = getattr(trigger, "task_instance", None)
    if ti is None:
        return
    try:
        state = await asyncio.wait_for(task_state(ti), STATE_TIMEOUT)
    except Exception as exc:
        trigger.log.warning(
            "Trigger stopped and the task's state could not be read (%s: %s): the kinetic "
            "work is left running. Cancel it with `kinetic jobs cancel` if the task was killed.",
            type(exc).__name__,
            exc,
        )
        return
    if state in ENDED_BY_USER:
        trigger.log.info("The task is now %s: cancelling its kinetic work.", state)
        await trigger.on_kill()
    else:
        trigger.log.info(
            "Trigger stopped while the task is %s (triggerer restart or timeout): "
            "the kinetic work keeps running.",
            state,
        )
