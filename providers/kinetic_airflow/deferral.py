"""Handing a task's wait to the triggerer: build the kinetic trigger and defer to it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, NoReturn, Protocol

from airflow.triggers.base import BaseTrigger

import kinetic_core as kc
from kinetic_airflow.triggers import KineticBatchTrigger, KineticJobTrigger


class KineticWaiter(Protocol):
    """A task that waits on kinetic work: its connection, poll interval and kill policy."""

    @property
    def kinetic_conn_id(self) -> str | None: ...

    @property
    def poll_interval(self) -> float: ...

    @property
    def cancel_on_kill(self) -> bool: ...

    def defer(
        self,
        *,
        trigger: BaseTrigger,
        method_name: str,
        kwargs: dict[str, Any] | None = None,
        timeout: timedelta | int | float | None = None,
    ) -> NoReturn: ...


def defer_to_trigger(
    task: KineticWaiter,
    work: kc.JobHandle | kc.BatchHandle,
    *,
    timeout: timedelta | None,
    stream_logs: bool = False,
    log_workers: int | str = 0,
) -> NoReturn:
    """Defer ``task`` until ``work`` (a job or a batch) is terminal; resume in ``execute_complete``."""
    trigger: KineticJobTrigger | KineticBatchTrigger
    if isinstance(work, kc.BatchHandle):
        trigger = KineticBatchTrigger(
            batch=work.to_json(),
            kinetic_conn_id=task.kinetic_conn_id,
            poll_interval=task.poll_interval,
            cancel_on_kill=task.cancel_on_kill,
            log_lines_per_child=getattr(task, "log_lines_per_child", 20),
        )
    else:
        trigger = KineticJobTrigger(
            handle=work.to_json(),
            kinetic_conn_id=task.kinetic_conn_id,
            poll_interval=task.poll_interval,
            stream_logs=stream_logs,
            log_workers=log_workers,
            cancel_on_kill=task.cancel_on_kill,
        )
    task.defer(trigger=trigger, method_name="execute_complete", timeout=timeout)
