"""Reading runs, logs and artifacts back through the Prefect API."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any
from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    FlowRunFilter,
    FlowRunFilterId,
    LogFilter,
    LogFilterFlowRunId,
)
from prefect.logging.handlers import APILogHandler


def task_runs(flow_run_id: UUID) -> list[Any]:
    """The flow run's task runs once the server holds each in a final state: task run
    states reach it as events, which can land after the flow returned (a fresh-clone CI
    run read none)."""

    async def read() -> list[Any]:
        async with get_client() as client:
            return await client.read_task_runs(
                flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
            )

    def settled() -> list[Any]:
        runs = asyncio.run(read())
        return runs if runs and all(r.state and r.state.is_final() for r in runs) else []

    return eventually(settled, timeout=30, what=f"the task runs of flow run {flow_run_id}")


def flow_run_logs(flow_run_id: UUID) -> list[str]:
    APILogHandler().flush()

    async def read() -> list[str]:
        async with get_client() as client:
            logs = await client.read_logs(
                LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id]))
            )
            return [log.message for log in logs]

    return asyncio.run(read())


def flow_run_artifacts(flow_run_id: UUID) -> list[Any]:
    async def read() -> list[Any]:
        async with get_client() as client:
            return await client.read_artifacts(
                artifact_filter=ArtifactFilter(
                    flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])
                )
            )

    return asyncio.run(read())


def eventually(predicate: Callable[[], Any], timeout: float = 60.0, what: str = "condition") -> Any:
    """Test-side wait for something another thread or process does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
