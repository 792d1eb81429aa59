"""Handing a task's wait to the triggerer: build the kinetic trigger and defer to it."""

from __future__ import annotations

from datetime import timedelta
from typing import NoReturn

from airflow.sdk import BaseOperator

import kinetic_core as kc
from kinetic_airflow.triggers import KineticBatchTrigger, KineticJobTrigger


def defer_to_trigger(
    task: BaseOperator,
    work: kc.JobHandle | kc.BatchHandle,
    *,
    kinetic_conn_id: str | None,
    poll_interval: float,
    cancel_on_kill: bool,
    timeout: timedelta | None,
    stream_logs: bool = False,
) -> NoReturn:
    """Defer ``task`` until ``work`` (a job or a batch) is terminal; resume in ``execute_complete``."""
    trigger: KineticJobTrigger | KineticBatchTrigger
    if isinstance(work, kc.BatchHandle):
        trigger = KineticBatchTrigger(
            batch=work.to_json(),
            kinetic_conn_id=kinetic_conn_id,
            poll_interval=poll_interval,
            cancel_on_kill=cancel_on_kill,
        )
    else:
        trigger = KineticJobTrigger(
            handle=work.to_json(),
            kinetic_conn_id=kinetic_conn_id,
            poll_interval=poll_interval,
            stream_logs=stream_logs,
            cancel_on_kill=cancel_on_kill,
        )
    task.defer(trigger=trigger, method_name="execute_complete", timeout=timeout)
