"""KineticOperator: run one function as a detached job; submit once, defer, collect."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import kinetic_core as kc
from kinetic_airflow.assets import annotate_outlets, usage_line
from kinetic_airflow.compat import AirflowException, AirflowFailException
from kinetic_airflow.deferral import defer_to_trigger
from kinetic_airflow.failures import KineticJobError
from kinetic_airflow.identity import (
    STORE_DELIVERED,
    STORE_HANDLE,
    STORE_JOB_ID,
    state_store,
    store_get,
    store_set,
)
from kinetic_airflow.lineage import job_lineage
from kinetic_airflow.links import link_xcoms
from kinetic_airflow.operators.base import KineticBaseOperator
from kinetic_airflow.triggers import EVENT_ERROR

RESULT_MODES = ("value", "reference")


class KineticOperator(KineticBaseOperator):
    """Run ``python_callable(*op_args, **op_kwargs)`` as a detached kinetic job.

    The worker slot is released while the job runs (``deferrable=True``). The return
    value goes to XCom (``result="value"``) or, for large results, XCom holds a small
    reference ``{"job_id", "result_uri", "output_dir", "storage"}`` (``result="reference"``);
    read it with ``kinetic_core.attach(job_id).result()``.

    :param python_callable: the function to run remotely (functions defined in DAG files work).
    :param op_args: positional arguments (templated).
    :param op_kwargs: keyword arguments (templated).
    :param kinetic_conn_id: connection of type ``kinetic`` (missing ``kinetic_default``: env/defaults).
    :param target: ``kinetic_core.Target`` options overriding the connection (templated).
    :param deferrable: defer to ``KineticJobTrigger`` (default) or wait in the worker.
    :param poll_interval: steady-state seconds between status polls / log reads.
    :param cancel_on_kill: cancel the job when the task is killed, cleared, marked or times out.
    :param stream_logs: copy the job's log into the task log while waiting.
    :param log_workers: whose log a multi-host job streams: a worker index (default 0,
        the coordinator) or ``"all"`` (every worker's lines, prefixed ``[w3] ``).
    :param result: ``"value"`` or ``"reference"``.
    """

    template_fields: Sequence[str] = ("op_args", "op_kwargs", "target", "job_tags")
    template_fields_renderers = {"op_args": "py", "op_kwargs": "py", "target": "json"}
    shallow_copy_attrs: Sequence[str] = ("python_callable",)

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Collection[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        stream_logs: bool = True,
        log_workers: int | str = 0,
        result: str = "value",
        **kwargs: Any,
    ) -> None:
        if python_callable is None:
            raise ValueError("KineticOperator needs python_callable: the function to run remotely.")
        if not callable(python_callable):
            raise TypeError(
                f"python_callable must be callable, got {type(python_callable).__name__}: {python_callable!r}."
            )
        if result not in RESULT_MODES:
            raise ValueError(f"result must be one of {RESULT_MODES}, got {result!r}.")
        kc.log_workers_option(log_workers)  # ConfigError at parse time, not in the triggerer
        super().__init__(**kwargs)
        self.python_callable = python_callable
        self.op_args = list(op_args or [])
        self.op_kwargs = dict(op_kwargs or {})
        self.stream_logs = stream_logs
        self.log_workers = log_workers
        self.result = result
        self._handle: kc.JobHandle | None = None

    # ---- submit -----------------------------------------------------------------------
    def submit(self, context: Mapping[str, Any], target: kc.Target) -> kc.JobHandle:
        """Submit, or reattach to the job this task already has in flight."""
        key = self.key_for(context)
        if not isinstance(self.op_args, list | tuple):
            raise AirflowFailException(
                f"op_args must render to a list, got {type(self.op_args).__name__}."
            )
        if not isinstance(self.op_kwargs, dict):
            raise AirflowFailException(
                f"op_kwargs must render to a dict, got {type(self.op_kwargs).__name__}."
            )
        try:
            handle = kc.submit(
                self.python_callable,
                list(self.op_args),
                dict(self.op_kwargs),
                target=target,
                idempotency_key=key,
                name=self.job_name or self.task_id,
                tags=self.job_tags_for(context),
            )
        except (kc.SerializationError, kc.ConfigError) as exc:
            raise AirflowFailException(f"Cannot submit task {self.task_id}: {exc}") from exc
        verb = "Reattached to" if handle.reattached else "Submitted"
        self.log.info(
            "%s kinetic job %s (attempt %s) at %s",
            verb,
            handle.job_id,
            handle.attempt,
            handle.location,
        )
        self._handle = handle
        ti = context["ti"]
        ti.xcom_push(key="job_id", value=handle.job_id)
        for key, url in link_xcoms(handle).items():
            ti.xcom_push(key=key, value=url)
        store = state_store(context)
        store_set(store, STORE_JOB_ID, handle.job_id)
        store_set(store, STORE_HANDLE, handle.to_json())
        return handle

    def execute(self, context: Any) -> Any:
        target = self.resolve_target()
        handle = self.submit(context, target)
        if self.deferrable:
            defer_to_trigger(
                self,
                handle,
                timeout=self.defer_timeout(context),
                stream_logs=self.stream_logs,
                log_workers=self.log_workers,
            )
        if self.stream_logs:
            for line in handle.follow_logs(worker=kc.log_workers_option(self.log_workers)):
                self.log.info("[%s] %s", handle.job_id, line)
        handle.wait()  # execution_timeout interrupts this; on_kill then cancels the job
        return self.collect(context, handle)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        """Resume from the trigger: return the value / reference or raise with the remote details."""
        if event.get("status") == EVENT_ERROR:
            raise AirflowException(
                f"The kinetic trigger could not observe job {event.get('job_id')}: {event.get('message')}. "
                "The job keeps running; a retry of this task reattaches to it."
            )
        target = self.resolve_target()
        handle = kc.JobHandle.from_json(event["handle"], signing_key=target.signing_key)
        self._handle = handle
        return self.collect(context, handle)

    def collect(self, context: Mapping[str, Any], handle: kc.JobHandle) -> Any:
        state = handle.state()
        if self.result == "reference" and state.status is kc.JobStatus.SUCCEEDED:
            value: Any = {
                "job_id": handle.job_id,
                "result_uri": handle.result_uri,
                "output_dir": handle.output_dir,
                "storage": handle.storage,
            }
            handle.mark_collected()  # delivered: clearing this task later runs a new job
        else:
            try:
                value = handle.result(timeout=60)
            except Exception as exc:
                message = kc.describe_failure(handle, exc)
                self.log.error("%s", message)
                self.log.info("%s", usage_line(handle))
                raise KineticJobError(message) from exc
        self.log.info("Kinetic job %s succeeded", handle.job_id)
        store_set(state_store(context), STORE_DELIVERED, handle.job_id)
        annotate_outlets(
            context, self.outlets, handle, None if self.result == "reference" else value
        )
        self.log.info("%s", usage_line(handle))  # the task log's last line: what it used
        return value

    # ---- lineage ----------------------------------------------------------------------
    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage (when its provider is installed): the ``Data`` arguments as inputs, the
        job's output folder as output, a ``kinetic`` run facet (attempt, recoveries, ...)."""
        if self._handle is None:
            return None
        return job_lineage(self._handle, (self.op_args, self.op_kwargs))

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        return self.get_openlineage_facets_on_complete(task_instance)

    # ---- kill -------------------------------------------------------------------------
    def on_kill(self) -> None:
        """Non-deferrable mode (and execution_timeout): cancel the job we are waiting on."""
        if self.cancel_on_kill and self._handle is not None:
            cancelled = self._handle.cancel()
            self.log.info(
                "Kinetic job %s %s",
                self._handle.job_id,
                "cancelled" if cancelled else "had already finished",
            )

    def cancel_from_context(self, context: Mapping[str, Any]) -> None:
        ti = context["ti"]
        job_id = store_get(state_store(context), STORE_JOB_ID) or ti.xcom_pull(
            task_ids=ti.task_id, key="job_id", map_indexes=ti.map_index
        )
        if not job_id:
            return
        handle = kc.attach(job_id, target=self.resolve_target())
        handle.cancel()
        self.log.info("Cancelled kinetic job %s", job_id)
