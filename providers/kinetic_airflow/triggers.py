"""Triggers: wait for kinetic jobs in the triggerer through the core's async twins.

Every wait registers with the core's process-wide shared poller, so N deferred tasks
cost one bulk backend poll per interval, not N. The triggers hold no loop of their own:
log streaming is ``JobHandle.afollow_logs`` and batch progress is ``BatchHandle.aprogress``.
"""

from __future__ import annotations

import asyncio
import json
import traceback
import weakref
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

import kinetic_core as kc
from kinetic_airflow.hooks import KineticHook
from kinetic_airflow.kill_check import cancel_if_killed

#: ``TriggerEvent`` payload ``status`` values.
EVENT_SUCCESS = "success"
EVENT_FAILED = "failed"
EVENT_ERROR = "error"  # the trigger itself could not observe the job


#: Triggers that take their first step (log line, handle, registering with the shared
#: poller) per event-loop iteration.
STARTS_PER_ITERATION = 20


class _Turns:
    """Spreads the first steps of triggers starting at once over loop iterations.

    A triggerer starts thousands of deferred triggers in one go; their first steps all
    ran in one loop iteration (~1 ms each on a loaded machine: 5,000 stalled the loop for
    seconds). Past ``STARTS_PER_ITERATION`` in an iteration, a trigger waits in FIFO
    order for a later one (O(1) each, no busy retries)."""

    _of: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Turns] = weakref.WeakKeyDictionary()

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.used = 0
        self.queue: deque[asyncio.Future[None]] = deque()
        self.scheduled = False

    @classmethod
    async def take(cls) -> None:
        loop = asyncio.get_running_loop()
        turns = cls._of.get(loop)
        if turns is None:
            turns = cls._of[loop] = cls(loop)
        await turns._take()

    async def _take(self) -> None:
        self._schedule()
        if self.used < STARTS_PER_ITERATION and not self.queue:
            self.used += 1
            return
        turn = self.loop.create_future()
        self.queue.append(turn)
        await turn

    def _schedule(self) -> None:
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self._next_iteration)

    def _next_iteration(self) -> None:
        self.scheduled, self.used = False, 0
        while self.queue and self.used < STARTS_PER_ITERATION:
            turn = self.queue.popleft()
            if not turn.done():  # not cancelled while it waited
                turn.set_result(None)
                self.used += 1
        if self.queue:
            self._schedule()


def status_of(state: kc.JobState) -> str:
    return EVENT_SUCCESS if state.status is kc.JobStatus.SUCCEEDED else EVENT_FAILED


class KineticJobTrigger(BaseTrigger):
    """Fire once when a kinetic job is terminal; optionally stream its log into the task log.

    Serializes only the handle JSON (no secrets), the connection id and options. The
    signing key is not needed to observe a job; ``execute_complete`` resolves it from
    the connection again to verify the result.

    :param handle: ``JobHandle.to_json()``.
    :param kinetic_conn_id: connection the job was submitted with (for the log line only here).
    :param poll_interval: seconds between log reads while streaming.
    :param stream_logs: copy new job log text into the task log while waiting.
    :param log_cursor: where streaming starts (``None``: from the beginning).
    :param cancel_on_kill: cancel the job when a user kills the deferred task.
    :param log_workers: a multi-host job's worker whose log is streamed (default 0), or
        ``"all"`` (every worker's lines, prefixed ``[w3] ``).
    """

    def __init__(
        self,
        handle: str,
        kinetic_conn_id: str | None = None,
        poll_interval: float = 30.0,
        stream_logs: bool = True,
        log_cursor: str | None = None,
        cancel_on_kill: bool = True,
        log_workers: int | str = 0,
    ) -> None:
        super().__init__()
        self.handle_json = handle
        self.log_workers = log_workers
        self.kinetic_conn_id = kinetic_conn_id
        self.poll_interval = float(poll_interval)
        self.stream_logs = stream_logs
        self.log_cursor = log_cursor
        self.cancel_on_kill = cancel_on_kill

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "handle": self.handle_json,
                "kinetic_conn_id": self.kinetic_conn_id,
                "poll_interval": self.poll_interval,
                "stream_logs": self.stream_logs,
                "log_cursor": self.log_cursor,
                "cancel_on_kill": self.cancel_on_kill,
                "log_workers": self.log_workers,
            },
        )

    @property
    def handle(self) -> kc.JobHandle:
        return kc.JobHandle.from_json(self.handle_json)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        await _Turns.take()  # thousands starting at once: a share of each loop iteration
        handle = self.handle
        self.log.info(
            "Waiting for kinetic job %s (connection %s, storage %s)",
            handle.job_id,
            self.kinetic_conn_id,
            handle.storage,
        )
        try:
            if self.kinetic_conn_id:  # a kubeconfig given as content is known in this process
                await KineticHook(self.kinetic_conn_id).aget_target()
            if self.stream_logs:
                stream = handle.afollow_logs(
                    cursor=self.log_cursor,
                    interval=self.poll_interval,
                    worker=kc.log_workers_option(self.log_workers),
                )
                async for line in stream:
                    self.log.info("[%s] %s", handle.job_id, line)
                self.log_cursor = stream.cursor
                state = stream.state or await handle.astate()
            else:
                state = await handle.await_()
        except asyncio.CancelledError:
            await cancel_if_killed(self)
            raise
        except Exception as exc:
            self.log.exception("Could not observe kinetic job %s", handle.job_id)
            yield TriggerEvent(
                {
                    "status": EVENT_ERROR,
                    "job_id": handle.job_id,
                    "handle": self.handle_json,
                    "message": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(),
                }
            )
            return
        self.log.info(
            "Kinetic job %s is %s (%s)", handle.job_id, state.status.value, state.reason or "-"
        )
        if state.recoveries:  # no orchestrator retry was used: the job recovered itself
            self.log.info("Kinetic job %s %s", handle.job_id, state.recovery_note)
        yield TriggerEvent(
            {
                "status": status_of(state),
                "job_id": handle.job_id,
                "handle": self.handle_json,
                "state": state.to_dict(),
                "log_cursor": self.log_cursor,
            }
        )

    async def on_kill(self) -> None:
        """A user killed the deferred task (mark failed/success, clear): cancel the job.

        Called by the triggerer from Airflow 3.3; before, by ``cancel_if_killed``."""
        if not self.cancel_on_kill:
            return
        handle = self.handle
        cancelled = await handle.acancel()
        self.log.info(
            "Kinetic job %s %s", handle.job_id, "cancelled" if cancelled else "had already finished"
        )


class KineticBatchTrigger(BaseTrigger):
    """Fire once when every child of a kinetic batch is terminal (one trigger per batch).

    While it waits it streams the children's new log lines into the task log, prefixed
    ``[child i]``, at most ``log_lines_per_child`` per child per poll (0: none).
    """

    def __init__(
        self,
        batch: str,
        kinetic_conn_id: str | None = None,
        poll_interval: float = 30.0,
        cancel_on_kill: bool = True,
        log_lines_per_child: int = 20,
    ) -> None:
        super().__init__()
        self.batch_json = batch
        self.kinetic_conn_id = kinetic_conn_id
        self.poll_interval = float(poll_interval)
        self.cancel_on_kill = cancel_on_kill
        self.log_lines_per_child = int(log_lines_per_child)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "batch": self.batch_json,
                "kinetic_conn_id": self.kinetic_conn_id,
                "poll_interval": self.poll_interval,
                "cancel_on_kill": self.cancel_on_kill,
                "log_lines_per_child": self.log_lines_per_child,
            },
        )

    async def _batch(self) -> kc.BatchHandle:
        ref = json.loads(self.batch_json)
        target = await KineticHook(self.kinetic_conn_id).aget_target({"storage": ref["storage"]})
        return await kc.aattach_batch(ref["group_id"], target=target)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        group_id = None
        try:
            batch = await self._batch()
            group_id = batch.group_id
            last = ""
            progress = None
            tail = batch.log_tail(self.log_lines_per_child)
            # Following the batch drives it too: launches, retries, fail_fast.
            async for progress in batch.aprogress():
                for line in await tail.aread():  # children's lines, bounded per tick
                    self.log.info("%s", line)
                if progress.describe() != last:  # one line per change, not per tick
                    last = progress.describe()
                    self.log.info("Kinetic batch %s: %s", group_id, last)
            counts = {str(k): v for k, v in progress.counts.items()} if progress else {}
        except asyncio.CancelledError:
            await cancel_if_killed(self)
            raise
        except Exception as exc:
            self.log.exception("Could not observe kinetic batch %s", group_id)
            yield TriggerEvent(
                {
                    "status": EVENT_ERROR,
                    "group_id": group_id,
                    "message": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(),
                }
            )
            return
        ok = progress is not None and all(status.ok for status in progress.counts)
        self.log.info("Kinetic batch %s finished: %s", group_id, counts)
        yield TriggerEvent(
            {
                "status": EVENT_SUCCESS if ok else EVENT_FAILED,
                "group_id": group_id,
                "counts": counts,
            }
        )

    async def on_kill(self) -> None:
        if not self.cancel_on_kill:
            return
        batch = await self._batch()
        await batch.acancel()
        self.log.info("Kinetic batch %s cancelled", batch.group_id)
