"""KineticOperator and KineticBatchOperator: submit once, defer, collect.

``execute()`` submits with the idempotency key ``airflow/{dag_id}/{task_id}/{run_id}/{map_index}``
so any retry (worker crash, triggerer crash, operator failure) reattaches to a job that
is still running or succeeded-but-uncollected; a FAILED job is resubmitted as a new attempt.
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import UTC, timedelta
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowNotFoundException,
    TaskDeferralTimeout,
)

import kinetic_core as kc
from kinetic_airflow.hooks import DEFAULT_CONN_ID, KineticHook
from kinetic_airflow.links import XCOM_JOB_URL, KineticJobLink, job_url
from kinetic_airflow.triggers import EVENT_ERROR, KineticBatchTrigger, KineticJobTrigger

RESULT_MODES = ("value", "reference")
#: task_state_store keys (Airflow >= 3.3).
STORE_JOB_ID = "kinetic_job_id"
STORE_HANDLE = "kinetic_handle"
STORE_DELIVERED = "kinetic_delivered"
LOG_TAIL_LINES = 50


class KineticJobError(AirflowException):
    """The remote job failed, was cancelled or lost. The message carries the remote
    exception and traceback, the job's reason and the tail of its log."""


def idempotency_key(context: Mapping[str, Any], prefix: str = "airflow") -> str:
    """The task's stable identity: (dag_id, task_id, run_id, map_index)."""
    ti = context["ti"]
    return f"{prefix}/{ti.dag_id}/{ti.task_id}/{ti.run_id}/{ti.map_index}"


def state_store(context: Mapping[str, Any]) -> Any | None:
    """``context['task_state_store']`` where the running Airflow has it (3.3+), else None."""
    try:
        return context.get("task_state_store")
    except Exception:
        return None


def _store_get(store: Any, key: str) -> Any:
    if store is None:
        return None
    try:
        return store.get(key)
    except Exception:  # the store is a convenience; the idempotency key is the guarantee
        return None


def _store_set(store: Any, key: str, value: Any) -> None:
    if store is None:
        return
    try:
        store.set(key, value)
    except Exception:
        pass


def describe_failure(handle: kc.JobHandle, exc: BaseException, log_tail: str | None = None) -> str:
    """One message with the job's status/reason, the remote exception + traceback and the log tail."""
    state: Any = getattr(exc, "state", None)
    if state is None:
        try:
            state = handle.state()
        except Exception:
            state = None
    head = f"Kinetic job {handle.job_id} (attempt {handle.attempt})"
    if state is not None:
        head += f" {state.status.value} (reason: {state.reason or '-'}"
        head += f", exit code {state.exit_code})" if state.exit_code is not None else ")"
        if state.message:
            head += f": {state.message}"
    parts = [head, "".join(traceback.format_exception_only(type(exc), exc)).rstrip()]
    # format_exception_only includes __notes__ (the remote traceback of rebuilt exceptions);
    # RemoteError carries it in its message.
    if log_tail is None:
        log_tail = getattr(exc, "log_tail", None) or _safe_tail(handle)
    if log_tail and log_tail.strip():
        parts.append(
            f"--- last {LOG_TAIL_LINES} log lines of {handle.job_id} ---\n{log_tail.rstrip()}"
        )
    return "\n".join(parts)


def _safe_tail(handle: kc.JobHandle) -> str:
    try:
        return handle.logs(tail=LOG_TAIL_LINES)
    except Exception:
        return ""


class _KineticBase(BaseOperator):
    """Target resolution, idempotency and deferral timeout shared by the kinetic operators."""

    operator_extra_links = (KineticJobLink(),)
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
        if (
            isinstance(poll_interval, bool)
            or not isinstance(poll_interval, int | float)
            or poll_interval <= 0
        ):
            raise kc.ConfigError(
                f"poll_interval must be a positive number of seconds, got {poll_interval!r}."
            )
        self.kinetic_conn_id = kinetic_conn_id
        self.target = (
            target.to_dict(include_secrets=True) if isinstance(target, kc.Target) else target
        )
        self.deferrable = deferrable
        self.poll_interval = float(poll_interval)
        self.cancel_on_kill = cancel_on_kill
        self.job_name = job_name
        self.job_tags = job_tags

    # ---- configuration ----------------------------------------------------------------
    def resolve_target(self) -> kc.Target:
        """Connection + ``target`` overrides + ``poll_interval``, validated (bad input fails, no retry)."""
        overrides = self.target
        try:
            if isinstance(overrides, str):
                overrides = json.loads(overrides) if overrides.strip() else None
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
        ti = context["ti"]
        tags = {
            "airflow-dag-id": ti.dag_id,
            "airflow-task-id": ti.task_id,
            "airflow-run-id": ti.run_id,
            "airflow-map-index": str(ti.map_index),
        }
        tags.update(self.job_tags or {})
        return tags

    def key_for(self, context: Mapping[str, Any]) -> str:
        """Idempotency key; after a previous try of this task delivered a result (the task was
        cleared), a new key generation so clearing a successful task runs a new job."""
        key = idempotency_key(context)
        delivered = _store_get(state_store(context), STORE_DELIVERED)
        return f"{key}/after/{delivered}" if delivered else key

    def defer_timeout(self, context: Mapping[str, Any]) -> timedelta | None:
        """What is left of ``execution_timeout`` (Airflow does not bound deferred time itself)."""
        if self.execution_timeout is None:
            return None
        start = getattr(context["ti"], "start_date", None)
        elapsed = 0.0
        if start is not None:
            from datetime import datetime

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


class KineticOperator(_KineticBase):
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
        super().__init__(**kwargs)
        self.python_callable = python_callable
        self.op_args = list(op_args or [])
        self.op_kwargs = dict(op_kwargs or {})
        self.stream_logs = stream_logs
        self.result = result
        self._handle: kc.JobHandle | None = None

    # ---- submit -----------------------------------------------------------------------
    def submit(self, context: Mapping[str, Any], target: kc.Target) -> kc.JobHandle:
        """Submit, or reattach to the job this task already has in flight."""
        key = self.key_for(context)
        started = time.time()
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
        verb = "Reattached to" if handle.created_at < started else "Submitted"
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
        ti.xcom_push(key=XCOM_JOB_URL, value=job_url(handle))
        store = state_store(context)
        _store_set(store, STORE_JOB_ID, handle.job_id)
        _store_set(store, STORE_HANDLE, handle.to_json())
        return handle

    def execute(self, context: Any) -> Any:
        target = self.resolve_target()
        handle = self.submit(context, target)
        if self.deferrable:
            self.defer(
                trigger=KineticJobTrigger(
                    handle=handle.to_json(),
                    kinetic_conn_id=self.kinetic_conn_id,
                    poll_interval=self.poll_interval,
                    stream_logs=self.stream_logs,
                    cancel_on_kill=self.cancel_on_kill,
                ),
                method_name="execute_complete",
                timeout=self.defer_timeout(context),
            )
        if self.stream_logs:
            for line in handle.follow_logs():
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
                "result_uri": f"{handle.location}/result.pkl",
                "output_dir": handle.output_dir,
                "storage": handle.storage,
            }
            handle.mark_collected()  # delivered: clearing this task later runs a new job
        else:
            try:
                value = handle.result(timeout=60)
            except Exception as exc:
                tail = getattr(exc, "log_tail", None) or _safe_tail(handle)
                message = describe_failure(handle, exc, tail)
                self.log.error("%s", message)
                raise KineticJobError(message) from exc
        self.log.info("Kinetic job %s succeeded", handle.job_id)
        _store_set(state_store(context), STORE_DELIVERED, handle.job_id)
        return value

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
        job_id = _store_get(state_store(context), STORE_JOB_ID) or ti.xcom_pull(
            task_ids=ti.task_id, key="job_id", map_indexes=ti.map_index
        )
        if not job_id:
            return
        handle = kc.attach(job_id, target=self.resolve_target())
        handle.cancel()
        self.log.info("Cancelled kinetic job %s", job_id)


class KineticBatchOperator(_KineticBase):
    """Fan ``python_callable`` out over ``inputs`` as one kinetic batch; one trigger waits for all.

    Each input becomes one job (dict -> kwargs, list/tuple -> args, else one argument; see
    ``input_mode``). Returns the list of results in input order. If children fail, the task
    fails with a ``BatchError`` summary and the partial results in the log
    (``return_exceptions=True`` returns exceptions in place instead, rendered as strings).

    :param inputs: one item per child job (templated).
    :param max_concurrency: children running at once.
    :param retries: per-child retries inside the batch.
    """

    template_fields: Sequence[str] = ("inputs", "target", "job_tags")
    template_fields_renderers = {"inputs": "py", "target": "json"}
    shallow_copy_attrs: Sequence[str] = ("python_callable",)

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        inputs: Any,
        max_concurrency: int = 64,
        child_retries: int = 0,
        input_mode: str = "auto",
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> None:
        if python_callable is None or not callable(python_callable):
            raise TypeError(f"python_callable must be callable, got {python_callable!r}.")
        super().__init__(**kwargs)
        self.python_callable = python_callable
        self.inputs = inputs
        self.max_concurrency = max_concurrency
        self.child_retries = child_retries
        self.input_mode = input_mode
        self.return_exceptions = return_exceptions
        self._batch: Any = None

    def execute(self, context: Any) -> Any:
        target = self.resolve_target()
        started = time.time()
        try:
            batch = kc.submit_map(
                self.python_callable,
                self.inputs,
                target=target,
                max_concurrency=self.max_concurrency,
                retries=self.child_retries,
                input_mode=self.input_mode,
                name=self.job_name or self.task_id,
                tags=self.job_tags_for(context),
                idempotency_key=self.key_for(context),
            )
        except (kc.SerializationError, kc.ConfigError, kc.SubmissionError) as exc:
            raise AirflowFailException(
                f"Cannot submit batch for task {self.task_id}: {exc}"
            ) from exc
        self._batch = batch
        verb = (
            "Reattached to" if batch.manifest.get("created_at", started) < started else "Submitted"
        )
        self.log.info("%s kinetic batch %s (%s inputs)", verb, batch.group_id, batch.total)
        context["ti"].xcom_push(key="group_id", value=batch.group_id)
        _store_set(state_store(context), "kinetic_group_id", batch.group_id)
        batch.wait_submitted()
        if self.deferrable:
            self.defer(
                trigger=KineticBatchTrigger(
                    batch=batch.to_json(),
                    kinetic_conn_id=self.kinetic_conn_id,
                    poll_interval=self.poll_interval,
                    cancel_on_kill=self.cancel_on_kill,
                ),
                method_name="execute_complete",
                timeout=self.defer_timeout(context),
            )
        batch.wait()
        return self.collect(context, batch)

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        if event.get("status") == EVENT_ERROR:
            raise AirflowException(
                f"The kinetic trigger could not observe batch {event.get('group_id')}: {event.get('message')}"
            )
        batch = self._attach(event["group_id"])
        self._batch = batch
        return self.collect(context, batch)

    def _attach(self, group_id: str) -> Any:
        return kc.attach_batch(group_id, target=self.resolve_target())

    def collect(self, context: Mapping[str, Any], batch: Any) -> Any:
        self.log.info("Kinetic batch %s: %s", batch.group_id, batch.status_counts())
        try:
            values = batch.results(return_exceptions=self.return_exceptions, timeout=60)
        except kc.BatchError as exc:
            lines = [f"{exc}"]
            for job in exc.failures:
                lines.append(describe_failure(job, _failure_of(job)))
            for index, err in exc.submission_failures.items():
                lines.append(f"input {index}: not submitted: {err}")
            lines.append(f"partial results (None where failed): {exc.partial_results!r}")
            message = "\n".join(lines)
            self.log.error("%s", message)
            raise KineticJobError(message) from exc
        if self.return_exceptions:
            values = [
                f"{type(v).__name__}: {v}" if isinstance(v, BaseException) else v for v in values
            ]
        _store_set(state_store(context), STORE_DELIVERED, batch.group_id)
        return values

    def on_kill(self) -> None:
        if self.cancel_on_kill and self._batch is not None:
            self._batch.cancel()
            self.log.info("Kinetic batch %s cancelled", self._batch.group_id)

    def cancel_from_context(self, context: Mapping[str, Any]) -> None:
        ti = context["ti"]
        group_id = _store_get(state_store(context), "kinetic_group_id") or ti.xcom_pull(
            task_ids=ti.task_id, key="group_id", map_indexes=ti.map_index
        )
        if group_id:
            self._attach(group_id).cancel()
            self.log.info("Cancelled kinetic batch %s", group_id)


def _failure_of(job: kc.JobHandle) -> BaseException:
    try:
        job.result(timeout=10, cleanup=False)
    except Exception as exc:
        return exc
    return kc.JobFailed(f"Job {job.job_id} reported as failed")
