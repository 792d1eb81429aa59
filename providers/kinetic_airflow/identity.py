"""A task instance's stable identity: its idempotency key, job tags and state-store entries."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: task_state_store keys (Airflow >= 3.3).
STORE_JOB_ID = "kinetic_job_id"
STORE_HANDLE = "kinetic_handle"
STORE_GROUP_ID = "kinetic_group_id"
STORE_DELIVERED = "kinetic_delivered"


def idempotency_key(context: Mapping[str, Any], prefix: str = "airflow") -> str:
    """The task's stable identity: (dag_id, task_id, run_id, map_index).

    Any retry (worker crash, triggerer crash, operator failure) submits with the same key,
    so it reattaches to a job that is still running or succeeded-but-uncollected; a FAILED
    job is resubmitted as a new attempt. The task state store is a convenience on top.
    """
    ti = context["ti"]
    return f"{prefix}/{ti.dag_id}/{ti.task_id}/{ti.run_id}/{ti.map_index}"


def key_generation(context: Mapping[str, Any]) -> str:
    """Idempotency key; after a previous try of this task delivered a result (the task was
    cleared), a new key generation so clearing a successful task runs a new job."""
    key = idempotency_key(context)
    delivered = store_get(state_store(context), STORE_DELIVERED)
    return f"{key}/after/{delivered}" if delivered else key


def task_tags(context: Mapping[str, Any]) -> dict[str, str]:
    """Job tags naming the task instance that submitted the job."""
    ti = context["ti"]
    return {
        "airflow-dag-id": ti.dag_id,
        "airflow-task-id": ti.task_id,
        "airflow-run-id": ti.run_id,
        "airflow-map-index": str(ti.map_index),
    }


def state_store(context: Mapping[str, Any]) -> Any | None:
    """``context['task_state_store']`` where the running Airflow has it (3.3+), else None."""
    try:
        return context.get("task_state_store")
    except Exception:
        return None


def store_get(store: Any, key: str) -> Any:
    """``store[key]``, or None without a store or when it cannot be read."""
    if store is None:
        return None
    try:
        return store.get(key)
    except Exception:  # the store is a convenience; the idempotency key is the guarantee
        return None


def store_set(store: Any, key: str, value: Any) -> None:
    """Best-effort ``store[key] = value`` (no store, or a failing one, is not an error)."""
    if store is None:
        return
    try:
        store.set(key, value)
    except Exception:
        pass
