"""Shared bits for in-process execute -> trigger -> resume tests (no scheduler)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any


class FakeTI:
    """The parts of a RuntimeTaskInstance the kinetic operators use."""

    def __init__(
        self, dag_id: str, task_id: str, run_id: str, map_index: int = -1, try_number: int = 1
    ) -> None:
        self.dag_id, self.task_id, self.run_id = dag_id, task_id, run_id
        self.map_index, self.try_number = map_index, try_number
        self.start_date = datetime.now(UTC)
        self.xcoms: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = value

    def xcom_pull(
        self, task_ids: Any = None, key: str = "return_value", map_indexes: Any = None
    ) -> Any:
        return self.xcoms.get(key)


class FakeStore(dict):  # type: ignore[type-arg]
    """A dict with the task_state_store accessor's get/set signature."""

    def set(self, key: str, value: Any, *, retention: Any = None) -> None:
        self[key] = value


def make_context(
    run_id: str | None = None,
    *,
    task_id: str = "t",
    try_number: int = 1,
    store: FakeStore | None = None,
) -> dict[str, Any]:
    run_id = run_id or f"manual__{uuid.uuid4().hex}"
    return {
        "ti": FakeTI("inproc", task_id, run_id, try_number=try_number),
        "task_state_store": store,
    }


def retry_of(context: dict[str, Any]) -> dict[str, Any]:
    """The next try of the same task instance (same run, same store)."""
    ti = context["ti"]
    return {
        **context,
        "ti": FakeTI(ti.dag_id, ti.task_id, ti.run_id, ti.map_index, ti.try_number + 1),
    }
