"""Prefect-side cancellation: is the flow run being cancelled, and cancelling the remote work."""

from __future__ import annotations

import threading
import time
from typing import Any
from uuid import UUID

import anyio

import kinetic_core as kc

_flow_run_checks: dict[UUID, tuple[float, bool]] = {}
_flow_run_checks_lock = threading.Lock()


async def flow_run_cancelling(flow_run_id: UUID, max_age: float) -> bool:
    """Whether the flow run is Cancelling/Cancelled, asked at most once per ``max_age`` per
    flow run in this process (all of its Kinetic tasks share the answer)."""
    now = time.monotonic()
    with _flow_run_checks_lock:
        cached = _flow_run_checks.get(flow_run_id)
    if cached is not None and now - cached[0] < max_age:
        return cached[1]
    from prefect.client.orchestration import get_client

    try:
        async with get_client() as client:
            flow_run = await client.read_flow_run(flow_run_id)
    except Exception:  # the API being unreachable is not a cancellation
        return False
    state = flow_run.state
    flag = bool(state is not None and (state.is_cancelling() or state.is_cancelled()))
    with _flow_run_checks_lock:
        if len(_flow_run_checks) > 1024:
            _flow_run_checks.clear()
        _flow_run_checks[flow_run_id] = (now, flag)
    return flag


async def cancel_remote(work: kc.JobHandle | kc.BatchHandle, logger: Any, why: str) -> None:
    """Cancel a job or a batch, shielded from the cancellation that got us here."""
    what = f"job {work.job_id}" if isinstance(work, kc.JobHandle) else f"batch {work.group_id}"
    try:
        with anyio.CancelScope(shield=True):
            cancelled = await work.acancel()
    except Exception as exc:
        logger.error("Could not cancel Kinetic %s (%s): %s", what, why, exc)
        return
    if cancelled is not False:  # a job says False when it had already finished
        logger.warning("Cancelled Kinetic %s: %s.", what, why)
