"""KineticJobSensor: wait for a job submitted anywhere (another DAG, the CLI, a notebook)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue

import kinetic_core as kc
from kinetic_airflow.compat import AirflowException, AirflowNotFoundException
from kinetic_airflow.deferral import defer_to_trigger
from kinetic_airflow.failures import KineticJobError
from kinetic_airflow.hooks import DEFAULT_CONN_ID, KineticHook
from kinetic_airflow.secrecy import split_signing_key, with_signing_key
from kinetic_airflow.triggers import EVENT_ERROR


class KineticJobSensor(BaseSensorOperator):
    """Succeed when the job is SUCCEEDED; fail (or skip with ``soft_fail``) when it failed,
    was cancelled or is unknown. Deferrable by default (one shared poll per interval in the
    triggerer); ``deferrable=False`` pokes with ``poke_interval`` / ``mode``.

    :param job_id: the job id (templated), e.g. ``{{ ti.xcom_pull('submit', key='job_id') }}``.
    :param collect_result: return the job's value (XCom); the result stays in storage for its owner.
    :param stream_logs: while deferred, copy the job's log into the task log.
    """

    template_fields: Sequence[str] = ("job_id", "target")
    #: The sensor watches someone else's job: it never cancels it.
    cancel_on_kill = False

    def __init__(
        self,
        *,
        job_id: str,
        kinetic_conn_id: str = DEFAULT_CONN_ID,
        target: dict[str, Any] | None = None,
        deferrable: bool = True,
        collect_result: bool = False,
        stream_logs: bool = False,
        poll_interval: float = 30.0,
        **kwargs: Any,
    ) -> None:
        poll_seconds = kc.positive_seconds(poll_interval, "poll_interval")
        kwargs.setdefault("poke_interval", poll_interval)
        super().__init__(**kwargs)
        if isinstance(target, dict):
            kc.Target.from_dict(target)
        self.target, self._signing_key = split_signing_key(target)  # the key is not templated
        self.job_id = job_id
        self.kinetic_conn_id = kinetic_conn_id
        self.deferrable = deferrable
        self.collect_result = collect_result
        self.stream_logs = stream_logs
        self.poll_interval = poll_seconds

    def _attach(self) -> kc.JobHandle:
        job_id = (self.job_id or "").strip()
        try:
            overrides = with_signing_key(self.target, self._signing_key, self.task_id)
            target = KineticHook(self.kinetic_conn_id).get_target(overrides)
            return kc.attach(job_id, target=target)
        except (kc.ConfigError, kc.JobNotFound, AirflowNotFoundException) as exc:
            raise AirflowException(
                f"{type(self).__name__}: cannot attach to job {job_id!r}: {exc}"
            ) from exc

    def _outcome(self, handle: kc.JobHandle, state: kc.JobState) -> Any:
        if state.status is not kc.JobStatus.SUCCEEDED:
            exc: BaseException = kc.JobFailed(
                f"job {handle.job_id} is {state.status.value}", state=state
            )
            if state.status is kc.JobStatus.FAILED:
                exc = kc.failure_data(handle, fallback=exc)  # shown, never unpickled
            raise KineticJobError(kc.describe_failure(handle, exc))
        if self.collect_result:
            return handle.result(timeout=60, cleanup=False)
        return None

    def execute(self, context: Any) -> Any:
        if not self.deferrable:
            return super().execute(context)
        handle = self._attach()
        state = handle.state()
        if state.terminal:
            return self._outcome(handle, state)
        defer_to_trigger(
            self, handle, timeout=timedelta(seconds=self.timeout), stream_logs=self.stream_logs
        )

    def poke(self, context: Any) -> bool | PokeReturnValue:
        handle = self._attach()
        state = handle.state()
        self.log.info("Kinetic job %s is %s", handle.job_id, state.status.value)
        if not state.terminal:
            return False
        return PokeReturnValue(is_done=True, xcom_value=self._outcome(handle, state))

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        if event.get("status") == EVENT_ERROR:
            raise AirflowException(
                f"Could not observe job {event.get('job_id')}: {event.get('message')}"
            )
        handle = self._attach()
        return self._outcome(handle, handle.state())
