"""A Prefect task run's stable identity: the idempotency key and tags that let retries reattach."""

from __future__ import annotations

import threading
from typing import Any

from prefect.context import FlowRunContext, TaskRunContext
from prefect.utilities.hashing import hash_objects

_identity_lock = threading.Lock()


def task_run_identity(
    ctx: TaskRunContext | None, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
) -> tuple[str | None, dict[str, str]]:
    """Idempotency key and job tags for the current task run.

    Prefect retries keep the task run, so a retry finds the key it used before. A
    flow-run retry creates new task runs; to let them find the jobs of the earlier flow
    attempt the key is (flow run, task, hash of the arguments, n-th such call in this
    flow attempt): calls with equal arguments are interchangeable, so concurrent calls
    completing out of order cannot swap jobs with different inputs. Arguments that
    cannot be hashed fall back to a key per task run (task retries still reattach).
    """
    if ctx is None:
        return None, {}
    run = ctx.task_run
    tags = {"prefect-task-run": str(run.id)}
    flow_ctx = FlowRunContext.get()
    if run.flow_run_id is None or flow_ctx is None or flow_ctx.flow_run is None:
        return f"prefect/task-run/{run.id}", tags
    tags["prefect-flow-run"] = str(run.flow_run_id)
    digest = hash_objects(args, kwargs or {})
    if digest is None:
        return f"prefect/task-run/{run.id}", tags
    # The flow run context is created afresh for each flow-run attempt, so counting in
    # it restarts at 0 on a flow retry; the per-task-run entry keeps Prefect retries stable.
    registry = flow_ctx.task_run_dynamic_keys
    with _identity_lock:
        assigned = registry.get(f"kinetic-prefect/run/{run.id}")
        if not isinstance(assigned, str):
            slot = f"kinetic-prefect/{run.task_key}/{digest}"
            count = registry.get(slot, 0)
            n = count if isinstance(count, int) else 0
            registry[slot] = n + 1
            assigned = f"prefect/flow-run/{run.flow_run_id}/{run.task_key}/{digest}/{n}"
            registry[f"kinetic-prefect/run/{run.id}"] = assigned
    return assigned, tags
