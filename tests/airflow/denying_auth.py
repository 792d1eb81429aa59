"""An auth manager for the tests: Airflow's SimpleAuthManager, except that user ``bob``
may not read DAG ``secret-dag``, nor every DAG at once (so no job submitted outside a DAG
is his to see). Named in ``AIRFLOW__CORE__AUTH_MANAGER``."""

from __future__ import annotations

from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

DENIED_USER = "bob"
DENIED_DAG = "secret-dag"
#: Every question the dashboard asked: (user, dag id or None for "every DAG").
ASKED: list[tuple[str, str | None]] = []


class DenyingAuthManager(SimpleAuthManager):
    def is_authorized_dag(self, *, method: Any, user: Any, **kwargs: Any) -> bool:
        details = kwargs.get("details")
        dag_id = getattr(details, "id", None)
        ASKED.append((user.get_name(), dag_id))
        if user.get_name() == DENIED_USER and dag_id in (DENIED_DAG, None):
            return False
        return bool(super().is_authorized_dag(method=method, user=user, **kwargs))
