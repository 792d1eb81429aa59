"""KineticBatchOperator: fan one function out as a kinetic batch; one trigger waits for all."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import kinetic_core as kc
from kinetic_airflow.compat import AirflowException, AirflowFailException
from kinetic_airflow.deferral import defer_to_trigger
from kinetic_airflow.failures import KineticJobError
from kinetic_airflow.identity import (
    STORE_DELIVERED,
    STORE_GROUP_ID,
    state_store,
    store_get,
    store_set,
)
from kinetic_airflow.links import link_xcoms
from kinetic_airflow.operators.base import KineticBaseOperator
from kinetic_airflow.triggers import EVENT_ERROR


class KineticBatchOperator(KineticBaseOperator):
    """Fan ``python_callable`` out over ``inputs`` as one kinetic batch; one trigger waits for all.

    Each input becomes one job (dict -> kwargs, list/tuple -> args, else one argument; see
    ``input_mode``). Returns the list of results in input order. If children fail, the task
    fails with a ``BatchError`` summary and the partial results in the log
    (``return_exceptions=True`` returns exceptions in place instead, rendered as strings).

    The worker slot is freed as soon as every child's call is staged: the batch runs
    detached (its own driver launches the children) and one trigger follows it, streaming
    the children's log lines into the task log.

    :param inputs: one item per child job (templated).
    :param max_concurrency: children running at once.
    :param retries: per-child retries inside the batch.
    :param fail_fast: stop the batch once a child failed for good (after its retries):
        nothing more is launched and running children are cancelled.
    :param log_lines_per_child: child log lines copied into the task log per child per
        poll while deferred (0: none).
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
        fail_fast: bool = False,
        log_lines_per_child: int = 20,
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
        self.fail_fast = fail_fast
        self.log_lines_per_child = log_lines_per_child
        self._batch: kc.BatchHandle | None = None

    def execute(self, context: Any) -> Any:
        target = self.resolve_target()
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
                fail_fast=self.fail_fast,
            )
        except (kc.SerializationError, kc.ConfigError, kc.SubmissionError) as exc:
            raise AirflowFailException(
                f"Cannot submit batch for task {self.task_id}: {exc}"
            ) from exc
        self._batch = batch
        verb = "Reattached to" if batch.reattached else "Submitted"
        self.log.info("%s kinetic batch %s (%s inputs)", verb, batch.group_id, batch.total)
        context["ti"].xcom_push(key="group_id", value=batch.group_id)
        for key, url in link_xcoms(None).items():  # a batch has no single job page
            context["ti"].xcom_push(key=key, value=url)
        store_set(state_store(context), STORE_GROUP_ID, batch.group_id)
        if self.deferrable:  # the batch runs detached: free the worker slot now
            defer_to_trigger(self, batch, timeout=self.defer_timeout(context))
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

    def _attach(self, group_id: str) -> kc.BatchHandle:
        return kc.attach_batch(group_id, target=self.resolve_target())

    def collect(self, context: Mapping[str, Any], batch: kc.BatchHandle) -> Any:
        progress = kc.BatchProgress(batch.group_id, batch.total, batch.status_counts())
        self.log.info("Kinetic batch %s: %s", batch.group_id, progress.describe())
        try:
            values = batch.results(return_exceptions=self.return_exceptions, timeout=60)
        except kc.BatchError as exc:
            message = kc.describe_batch_failure(exc)
            self.log.error("%s", message)
            raise KineticJobError(message) from exc
        if self.return_exceptions:
            values = [
                f"{type(v).__name__}: {v}" if isinstance(v, BaseException) else v for v in values
            ]
        store_set(state_store(context), STORE_DELIVERED, batch.group_id)
        return values

    def on_kill(self) -> None:
        if self.cancel_on_kill and self._batch is not None:
            self._batch.cancel()
            self.log.info("Kinetic batch %s cancelled", self._batch.group_id)

    def cancel_from_context(self, context: Mapping[str, Any]) -> None:
        ti = context["ti"]
        group_id = store_get(state_store(context), STORE_GROUP_ID) or ti.xcom_pull(
            task_ids=ti.task_id, key="group_id", map_indexes=ti.map_index
        )
        if group_id:
            self._attach(group_id).cancel()
            self.log.info("Cancelled kinetic batch %s", group_id)
