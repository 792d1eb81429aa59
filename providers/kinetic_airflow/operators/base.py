"""What every kinetic operator shares: target resolution, identity, deferral timeout, resume."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import BaseOperator

import kinetic_core as kc
from kinetic_airflow.compat import (
    AirflowFailException,
    AirflowNotFoundException,
    TaskDeferralTimeout,
)
from kinetic_airflow.hooks import DEFAULT_CONN_ID, KineticHook
from kinetic_airflow.identity import key_generation, task_tags
from kinetic_airflow.links import LINKS
from kinetic_airflow.secrecy import split_signing_key, with_signing_key


class KineticBaseOperator(BaseOperator):
    """Target resolution, idempotency and deferral timeout shared by the kinetic operators."""

    operator_extra_links = LINKS
    ui_color = "#e8f0fe"

    def __init__(
        self,
        *,
        kinetic_conn_id: str = DEFAULT_CONN_ID,
        target: kc.Target | dict[str, Any] | str | None = None,
        deferrable: bool = True,
        poll_interval: float = 30.0,
        cancel_on_kill: bool = True,
        job_name: str | None = None,
        job_tags: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if isinstance(target, dict):
            kc.Target.from_dict(target)  # unknown options fail at DAG parse
        elif not (target is None or isinstance(target, kc.Target | str)):
            raise kc.ConfigError(
                f"target must be a dict, a kinetic_core.Target or None, not {type(target).__name__}."
            )
        self.poll_interval = kc.positive_seconds(poll_interval, "poll_interval")
        self.kinetic_conn_id = kinetic_conn_id
        # The key stays out of ``target`` (templated: Airflow renders and stores it).
        self.target, self._signing_key = split_signing_key(target)
        self.deferrable = deferrable
        self.cancel_on_kill = cancel_on_kill
        self.job_name = job_name
        self.job_tags = job_tags

    @classmethod
    def partial(cls, **kwargs: Any) -> Any:
        """As ``BaseOperator.partial``; a dict target naming a signing key becomes a Target,
        which Airflow serializes (partial arguments go into the DAG) without the key."""
        target = kwargs.get("target")
        if isinstance(target, dict) and "signing_key" in target:
            kwargs["target"] = kc.Target.from_dict(target)
        return super().partial(**kwargs)

    # ---- configuration ----------------------------------------------------------------
    def resolve_target(self) -> kc.Target:
        """Connection + ``target`` overrides + ``poll_interval``, validated (bad input fails, no retry)."""
        try:
            overrides = with_signing_key(self.target, self._signing_key, self.task_id)
            target = KineticHook(self.kinetic_conn_id).get_target(overrides)
            if target.poll_interval is None:
                target = target.merge({"poll_interval": self.poll_interval})
            target.resolve()  # validate now; submit resolves again
        except (kc.ConfigError, ValueError, AirflowNotFoundException) as exc:
            raise AirflowFailException(
                f"Invalid kinetic configuration for task {self.task_id}: {exc}"
            ) from exc
        return target

    def job_tags_for(self, context: Mapping[str, Any]) -> dict[str, str]:
        """The task instance's tags, then the operator's ``job_tags``."""
        return {**task_tags(context), **(self.job_tags or {})}

    def key_for(self, context: Mapping[str, Any]) -> str:
        """Idempotency key for this try (see ``kinetic_airflow.identity.key_generation``)."""
        return key_generation(context)

    # ---- deferral ---------------------------------------------------------------------
    def defer_timeout(self, context: Mapping[str, Any]) -> timedelta | None:
        """What is left of ``execution_timeout`` (Airflow does not bound deferred time itself)."""
        if self.execution_timeout is None:
            return None
        start = getattr(context["ti"], "start_date", None)
        elapsed = 0.0
        if start is not None:
            elapsed = (datetime.now(UTC) - start).total_seconds()
        return max(self.execution_timeout - timedelta(seconds=elapsed), timedelta(seconds=1))

    def resume_execution(
        self, next_method: str, next_kwargs: dict[str, Any] | None, context: Any
    ) -> Any:
        try:
            return super().resume_execution(next_method, next_kwargs, context)
        except TaskDeferralTimeout:
            if self.cancel_on_kill:
                self.log.warning(
                    "execution_timeout reached while deferred: cancelling the kinetic work."
                )
                self.cancel_from_context(context)
            raise

    def cancel_from_context(
        self, context: Mapping[str, Any]
    ) -> None:  # pragma: no cover - overridden
        raise NotImplementedError
