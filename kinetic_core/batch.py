"""Batches: fan a function out over inputs with a persisted manifest.

Layout under ``batches/{group_id}/``: ``manifest.json`` (header, written first),
``children/{i}.json`` (one record per child: job id per attempt, submission error),
``state/`` create-only markers (``submission_complete``, ``cancel_requested``) and a
``state/submitter.json`` heartbeat. Bookkeeping grows linearly with children; no
growing document is ever rewritten.

Children are submitted with idempotency keys ``batch/{group_id}/{i}``, so a retried
``submit_map`` with the same key, or several processes retrying one failed child,
create exactly one job per child attempt. Retries are driven by whoever waits on the
batch (any process), because the submitting process may be gone (e.g. an Airflow
worker that deferred).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from kinetic_core.config import Target, validate_tags
from kinetic_core.errors import BatchError, ConfigError, JobCancelled, JobNotFound, SubmissionError
from kinetic_core.ids import key_digest, new_id, validate_id
from kinetic_core.jobs import JobHandle, load_handle, submit
from kinetic_core.payload import load_envelope
from kinetic_core.polling import poll_ticks, shared_poller
from kinetic_core.procs import process_alive, start_ticks
from kinetic_core.status import JobState, JobStatus, resolve_states
from kinetic_core.storage import Storage, open_storage

INPUT_MODES = ("auto", "args", "kwargs", "single")
DEFAULT_POLL_TIMEOUT = 24 * 3600.0  # an attached batch never waits forever by default
STALE_AFTER = 60.0  # a submitter silent this long is presumed dead
SUBMIT_FAILED = "SUBMIT_FAILED"
UNSUBMITTED = "UNSUBMITTED"


def _to_call(item: Any, mode: str, index: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Input item -> (args, kwargs): dict -> **kwargs, tuple/list -> *args, else one arg."""
    if mode == "auto":
        mode = (
            "kwargs"
            if isinstance(item, dict)
            else "args"
            if isinstance(item, tuple | list)
            else "single"
        )
    if mode == "single":
        return (item,), {}
    if mode == "args":
        if not isinstance(item, tuple | list):
            raise ConfigError(
                f"Input {index} must be a tuple or list in input_mode='args', got {item!r}."
            )
        return tuple(item), {}
    if not isinstance(item, dict) or not all(isinstance(k, str) and k.isidentifier() for k in item):
        raise ConfigError(
            f"Input {index} must be a dict whose keys are Python identifiers in kwargs mode, got {item!r}. "
            "Use input_mode='single' to pass dicts as one argument."
        )
    return (), dict(item)


@dataclass(frozen=True)
class _Plan:
    """What the submitting process needs to launch the children."""

    fn: Callable[..., Any]
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]]
    target: Target
    name: str
    tags: dict[str, str]
    max_concurrency: int


@dataclass
class ChildRecord:
    index: int
    attempts: list[str] = field(default_factory=list)
    error: dict[str, str] | None = None

    def to_json(self) -> bytes:
        return json.dumps(
            {"index": self.index, "attempts": self.attempts, "error": self.error}
        ).encode()


class BatchHandle:
    """A durable reference to a batch. Rebuild it anywhere with ``attach_batch``."""

    def __init__(
        self,
        manifest: dict[str, Any],
        *,
        signing_key: str | None = None,
        poll_timeout: float = DEFAULT_POLL_TIMEOUT,
    ) -> None:
        self.manifest = manifest
        self.group_id: str = manifest["group_id"]
        self.total: int = manifest["total_expected"]
        self.retries: int = manifest["retries"]
        self.signing_key = signing_key
        self.poll_timeout = poll_timeout
        self._storage = open_storage(manifest["storage"])
        self._records: dict[int, ChildRecord] = {}
        self._handles: dict[str, JobHandle] = {}
        self._errors: dict[int, BaseException] = {}  # live exceptions from this process's submitter
        self._submitter: threading.Thread | None = None
        self._lock = threading.Lock()

    # ---- storage records --------------------------------------------------------------
    def _key(self, name: str) -> str:
        return f"batches/{self.group_id}/{name}"

    def _marker(self, name: str) -> bool:
        return self._storage.exists(self._key(f"state/{name}"))

    def _set_marker(self, name: str) -> None:
        try:
            self._storage.write_bytes(self._key(f"state/{name}"), b"{}", create_only=True)
        except FileExistsError:
            pass

    def _save(self, record: ChildRecord) -> None:
        with self._lock:
            self._records[record.index] = record
        self._storage.write_bytes(self._key(f"children/{record.index}.json"), record.to_json())

    def _refresh(self) -> None:
        """Read child records we do not have yet (or whose latest attempt may have moved)."""
        if self._submitter is not None:
            return  # this process is the submitter: memory is the truth
        for name in self._storage.list_names(self._key("children")):
            index = int(name.split(".")[0])
            if index in self._records and self._records[index].error is None:
                continue
            self._reload(index)

    def _reload(self, index: int) -> ChildRecord | None:
        """Re-read one child record from storage (what we had if it cannot be read)."""
        try:
            data = json.loads(self._storage.read_bytes(self._key(f"children/{index}.json")))
        except (FileNotFoundError, ValueError):
            return self._records.get(index)
        rec = ChildRecord(data["index"], data["attempts"], data.get("error"))
        with self._lock:
            self._records[index] = rec
        return rec

    def _snapshot(self) -> dict[int, ChildRecord]:
        """A copy of the records: the submitter thread adds to them concurrently."""
        with self._lock:
            return dict(self._records)

    def _handle(self, job_id: str) -> JobHandle:
        if job_id not in self._handles:
            self._handles[job_id] = load_handle(self._storage, job_id, self.signing_key)
        return self._handles[job_id]

    # ---- public views -----------------------------------------------------------------
    @property
    def jobs(self) -> list[JobHandle | None]:
        """Latest attempt of each child; None where not (yet) submitted or submission failed."""
        self._refresh()
        out: list[JobHandle | None] = []
        for i in range(self.total):
            rec = self._records.get(i)
            out.append(self._handle(rec.attempts[-1]) if rec and rec.attempts else None)
        return out

    @property
    def submission_complete(self) -> bool:
        return self._marker("submission_complete")

    @property
    def cancel_requested(self) -> bool:
        return self._marker("cancel_requested")

    @property
    def submission_abandoned(self) -> bool:
        """The submitter stopped (killed, crashed) before submitting every child."""
        if self._submitter is not None and self._submitter.is_alive():
            return False
        if self.submission_complete:
            return False
        try:
            beat = json.loads(self._storage.read_bytes(self._key("state/submitter.json")))
        except (FileNotFoundError, ValueError):
            beat = {"at": self.manifest["created_at"]}
        return time.time() - beat["at"] > STALE_AFTER or not _submitter_alive(beat)

    @property
    def submission_failures(self) -> dict[int, BaseException]:
        self._refresh()
        failures: dict[int, BaseException] = {}
        records = self._snapshot()
        for i, rec in records.items():
            if rec.error and not rec.attempts:
                failures[i] = self._errors.get(i) or SubmissionError(
                    f"{rec.error['type']}: {rec.error['message']}"
                )
        if self.cancel_requested and self.submission_complete:
            for i in range(self.total):
                if i not in records:
                    failures[i] = JobCancelled(
                        f"Child {i} was not submitted: the batch was cancelled."
                    )
        elif self.submission_abandoned:
            for i in range(self.total):
                if i not in records:
                    failures[i] = SubmissionError(
                        f"Child {i} was never submitted: the submitter stopped. Call submit_map again "
                        "with the same idempotency_key to submit the missing children."
                    )
        return dict(sorted(failures.items()))

    def statuses(self) -> list[str]:
        """One status per input: a JobStatus value, ``SUBMIT_FAILED`` or ``UNSUBMITTED``."""
        return [s.status.value if isinstance(s, JobState) else s for s in self._states()]

    def status_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for s in self.statuses():
            counts[s] = counts.get(s, 0) + 1
        return counts

    def _states(self) -> list[JobState | str]:
        jobs = self.jobs  # refreshes records
        submitted = [j for j in jobs if j is not None]
        states = iter(resolve_states(submitted)) if submitted else iter(())  # one bulk poll
        failed = self.submission_failures
        return [
            next(states) if j is not None else SUBMIT_FAILED if i in failed else UNSUBMITTED
            for i, j in enumerate(jobs)
        ]

    def to_json(self) -> str:
        return json.dumps({"group_id": self.group_id, "storage": self.manifest["storage"]})

    # ---- waiting: one tracker, sync and async drivers ----------------------------------
    def as_completed(self, timeout: float | None = None) -> Iterator[JobHandle]:
        """Children as they finish (after their retries), while later ones are still submitted."""
        tracker = _Tracker(self)
        limit = self.poll_timeout if timeout is None else timeout
        # No early wake-ups here (unlike wait()): a batch polls once per interval.
        for _ in poll_ticks(interval=tracker.interval, timeout=limit, describe=tracker.describe):
            pending = tracker.pending()
            finished = (
                tracker.settle(zip(pending, resolve_states(pending), strict=True))
                if pending
                else []
            )
            for index in finished:
                yield tracker.final[index][0]
            if tracker.done():
                break

    def wait(self, timeout: float | None = None) -> list[str]:
        for _ in self.as_completed(timeout):
            pass
        return self.statuses()

    async def aas_completed(self, timeout: float | None = None) -> AsyncIterator[JobHandle]:
        """Async twin of ``as_completed``: children wait in the loop's shared poller."""
        tracker = _Tracker(self)
        poller = shared_poller()
        tasks: dict[str, asyncio.Task[JobState]] = {}
        deadline = time.monotonic() + (self.poll_timeout if timeout is None else timeout)
        try:
            while not await asyncio.to_thread(tracker.done):
                for handle in await asyncio.to_thread(tracker.pending):
                    if handle.job_id not in tasks:
                        tasks[handle.job_id] = asyncio.ensure_future(poller.wait(handle))
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"Timed out: {tracker.describe()}")
                live = [t for t in tasks.values() if not t.done()]
                if live:
                    await asyncio.wait(
                        live,
                        timeout=min(remaining, tracker.interval),
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                else:
                    await asyncio.sleep(min(remaining, tracker.interval))
                ready = [(self._handles[j], t.result()) for j, t in tasks.items() if t.done()]
                for job_id in [h.job_id for h, _ in ready]:
                    del tasks[job_id]
                for index in await asyncio.to_thread(tracker.settle, ready):
                    yield tracker.final[index][0]
        finally:
            for t in tasks.values():
                t.cancel()

    async def await_done(self, timeout: float | None = None) -> list[str]:
        async for _ in self.aas_completed(timeout):
            pass
        return await asyncio.to_thread(self.statuses)

    # ---- results ----------------------------------------------------------------------
    def results(
        self,
        *,
        ordered: bool = True,
        return_exceptions: bool = False,
        cleanup: bool = True,
        timeout: float | None = None,
    ) -> list[Any]:
        """Values per input (input order, or completion order with ``ordered=False``).

        Failures raise BatchError carrying the partial results, unless
        ``return_exceptions`` puts each exception in its place.
        """
        collected: list[tuple[int, Any, bool]] = []
        for handle in self.as_completed(timeout):
            collected.append(self._collect(handle, cleanup))
        return self._assemble(collected, ordered, return_exceptions)

    async def aresults(
        self,
        *,
        ordered: bool = True,
        return_exceptions: bool = False,
        cleanup: bool = True,
        timeout: float | None = None,
    ) -> list[Any]:
        collected: list[tuple[int, Any, bool]] = []
        async for handle in self.aas_completed(timeout):
            collected.append(await asyncio.to_thread(self._collect, handle, cleanup))
        return self._assemble(collected, ordered, return_exceptions)

    def _index_of(self, handle: JobHandle) -> int:
        return int(handle.tags["kinetic/index"])

    def _collect(self, handle: JobHandle, cleanup: bool) -> tuple[int, Any, bool]:
        try:
            return self._index_of(handle), handle.result(cleanup=cleanup), True
        except Exception as exc:
            return self._index_of(handle), exc, False

    def _assemble(
        self, collected: list[tuple[int, Any, bool]], ordered: bool, return_exceptions: bool
    ) -> list[Any]:
        sub_failures = self.submission_failures
        by_index = {i: (v, ok) for i, v, ok in collected}
        for i, exc in sub_failures.items():
            by_index.setdefault(i, (exc, False))
        order = sorted(by_index) if ordered else [i for i, _, _ in collected] + sorted(sub_failures)
        if return_exceptions:
            return [by_index[i][0] for i in order]
        failed = [i for i in order if not by_index[i][1] and i not in sub_failures]
        if failed or sub_failures:
            jobs = self.jobs
            raise BatchError(
                self.group_id,
                failures=[j for i in failed if (j := jobs[i]) is not None],
                partial_results=[
                    by_index[i][0] if by_index.get(i, (None, False))[1] else None
                    for i in range(self.total)
                ],
                submission_failures=sub_failures,
                total=self.total,
            )
        return [by_index[i][0] for i in order]

    def failures(self) -> list[JobHandle]:
        """Children whose final state is FAILED or CANCELLED (correct after cleanup too)."""
        jobs = [j for j in self.jobs if j is not None]
        return [
            j
            for j, s in zip(jobs, resolve_states(jobs), strict=True)
            if s.status in (JobStatus.FAILED, JobStatus.CANCELLED)
        ]

    # ---- stop -------------------------------------------------------------------------
    def cancel(self) -> None:
        """Durable: records cancel_requested (submitters everywhere stop launching), then
        cancels every child that is still running. Cancelled children are never retried."""
        self._set_marker("cancel_requested")
        for job in self.jobs:
            if job is not None:
                job.cancel()

    def cleanup(self, *, backend: bool = True, storage: bool = True) -> None:
        for job in self.jobs:
            if job is not None:
                job.cleanup(backend=backend, storage=storage)

    def wait_submitted(self, timeout: float | None = None) -> None:
        """Block until this process's background submitter has launched every child."""
        if self._submitter is not None:
            self._submitter.join(timeout)

    # ---- submission (background thread of the submitting process) ---------------------
    def _start(self, plan: _Plan) -> None:
        self._refresh()  # a resubmission knows what the first submitter recorded
        self._submitter = threading.Thread(
            target=self._submit_all,
            args=(plan,),
            name=f"kinetic-batch-{self.group_id}",
            daemon=True,
        )
        self._submitter.start()

    def _submit_all(self, plan: _Plan) -> None:
        inflight: list[JobHandle] = []
        last_check = 0.0
        recorded = [i for i, r in self._records.items() if r.attempts]
        latest = (
            resolve_states([self._handle(self._records[i].attempts[-1]) for i in recorded])
            if recorded
            else []
        )
        redo = {
            i
            for i, st in zip(recorded, latest, strict=True)
            if st.status in (JobStatus.FAILED, JobStatus.CANCELLED)
        }
        for index, (args, kwargs) in enumerate(plan.calls):
            now = time.time()
            if now - last_check > 1.0:
                last_check = now
                self._beat()
                if self.cancel_requested:
                    self._set_marker("submission_complete")
                    return
            rec = self._records.get(index)
            if rec is not None and rec.attempts and index not in redo:
                continue  # submitted by an earlier submitter (idempotent resubmission)
            inflight = self._wait_for_slot(inflight, plan.max_concurrency)
            if self.cancel_requested:
                self._set_marker("submission_complete")
                return
            try:
                job = submit(
                    plan.fn,
                    args,
                    kwargs,
                    target=plan.target,
                    name=plan.name,
                    idempotency_key=self.child_key(index),
                    reuse_succeeded=True,
                    tags={
                        **plan.tags,
                        "kinetic/group-id": self.group_id,
                        "kinetic/index": str(index),
                    },
                )
            except Exception as exc:
                self._errors[index] = exc
                self._save(
                    ChildRecord(index, [], {"type": type(exc).__name__, "message": str(exc)[:2000]})
                )
                continue
            self._handles[job.job_id] = job
            previous = rec.attempts if rec is not None else []
            self._save(
                ChildRecord(index, previous if job.job_id in previous else [*previous, job.job_id])
            )
            inflight.append(job)
        self._set_marker("submission_complete")

    def _wait_for_slot(self, inflight: list[JobHandle], limit: int) -> list[JobHandle]:
        if len(inflight) < limit:
            return inflight
        for _ in poll_ticks(interval=0.5, timeout=None, describe=lambda: "waiting for a free slot"):
            inflight = [
                j for j, s in zip(inflight, resolve_states(inflight), strict=True) if not s.terminal
            ]
            if len(inflight) < limit or self.cancel_requested:
                break
            self._beat()
        return inflight

    def _beat(self) -> None:
        beat = {
            "at": time.time(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "start_ticks": start_ticks(os.getpid()),
        }
        self._storage.write_bytes(self._key("state/submitter.json"), json.dumps(beat).encode())

    def child_key(self, index: int) -> str:
        return f"batch/{self.group_id}/{index}"

    def _retry(self, index: int, failed: JobHandle) -> JobHandle:
        """Resubmit a failed child as its next attempt, from its verified stored call."""
        _, call = load_envelope(
            self._storage,
            f"jobs/{failed.job_id}/payload.pkl",
            kind="call",
            job_id=failed.job_id,
            signing_key=failed._key,
        )
        job = submit(
            call["fn"],
            call["args"],
            call["kwargs"],
            target=Target.from_dict({**failed.target, "signing_key": self.signing_key}),
            name=failed.name,
            tags=failed.tags,
            idempotency_key=self.child_key(index),
        )
        self._handles[job.job_id] = job
        rec = self._records[index]
        if job.job_id not in rec.attempts:
            self._save(ChildRecord(index, [*rec.attempts, job.job_id]))
        return job


def _submitter_alive(beat: dict[str, Any]) -> bool:
    if beat.get("host") != socket.gethostname() or "pid" not in beat:
        return True  # cannot tell from here: rely on the heartbeat age
    return process_alive(beat["pid"], beat.get("start_ticks"))


class _Tracker:
    """The batch logic shared by the sync and async drivers: which children are still
    pending, which are final, and when a failed child gets another attempt."""

    def __init__(self, batch: BatchHandle) -> None:
        self.batch = batch
        self.final: dict[int, tuple[JobHandle, JobState]] = {}
        self.interval = min(float(batch.manifest["target"].get("poll_interval") or 5.0), 5.0)

    def pending(self) -> list[JobHandle]:
        jobs = self.batch.jobs
        return [j for i, j in enumerate(jobs) if j is not None and i not in self.final]

    def settle(self, observed: Any) -> list[int]:
        """Record terminal states; retry failed children with attempts left. Returns the
        indexes that became final."""
        newly: list[int] = []
        for handle, state in observed:
            if not state.terminal:
                continue
            index = self.batch._index_of(handle)
            rec = self.batch._records.get(index)
            if state.status is JobStatus.FAILED and not self.batch.cancel_requested:
                rec = self.batch._reload(index)
                if rec is not None and rec.attempts and rec.attempts[-1] != handle.job_id:
                    continue  # another process already retried it: follow that attempt
            attempts = len(rec.attempts) if rec else 1
            if (
                state.status is JobStatus.FAILED
                and attempts <= self.batch.retries
                and not self.batch.cancel_requested
            ):
                self.batch._retry(index, handle)
                continue
            self.final[index] = (handle, state)
            newly.append(index)
        return newly

    def done(self) -> bool:
        batch = self.batch
        return len(self.final) + len(batch.submission_failures) >= batch.total

    def describe(self) -> str:
        return (
            f"batch {self.batch.group_id}: {len(self.final)} of {self.batch.total} children "
            "finished; the batch keeps running, reattach with attach_batch(group_id)"
        )


# ---- entry points ---------------------------------------------------------------------------


def submit_map(
    fn: Callable[..., Any],
    inputs: Any,
    *,
    target: Target | dict[str, Any] | None = None,
    max_concurrency: int = 64,
    retries: int = 0,
    input_mode: str = "auto",
    name: str | None = None,
    tags: dict[str, str] | None = None,
    idempotency_key: str | None = None,
) -> BatchHandle:
    """Submit ``fn`` once per input as one batch; returns once the manifest is written.

    Children are submitted in the background (at most ``max_concurrency`` running at a
    time); ``wait_submitted()`` blocks until all are. With ``idempotency_key`` a second
    call reattaches to the same batch and submits only what is missing.
    """
    if not callable(fn):
        raise SubmissionError(f"Expected a callable to map, got {type(fn).__name__}.")
    items = list(inputs) if not isinstance(inputs, str | bytes) else None
    if not items:
        raise ConfigError("inputs must be a non-empty list (one item per child job).")
    if (
        not isinstance(max_concurrency, int)
        or isinstance(max_concurrency, bool)
        or max_concurrency < 1
    ):
        raise ConfigError(f"max_concurrency must be an integer >= 1, got {max_concurrency!r}.")
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise ConfigError(f"retries must be an integer >= 0, got {retries!r}.")
    if input_mode not in INPUT_MODES:
        raise ConfigError(
            f"Unknown input_mode {input_mode!r}; choose one of {', '.join(INPUT_MODES)}."
        )
    calls = [_to_call(item, input_mode, i) for i, item in enumerate(items)]
    try:
        cloudpickle.dumps(fn)
    except Exception as exc:
        raise SubmissionError(f"Cannot serialize {fn!r} for the batch: {exc}") from exc
    resolved = Target.coerce(target).resolve()
    batch_name: str = name or getattr(fn, "__qualname__", None) or "batch"
    all_tags = {**(resolved.tags or {}), **validate_tags(tags or {})}
    group_id = f"b{key_digest(idempotency_key)[:24]}" if idempotency_key else new_id(batch_name)
    manifest = {
        "version": 1,
        "group_id": group_id,
        "name": batch_name,
        "tags": all_tags,
        "total_expected": len(calls),
        "created_at": time.time(),
        "storage": resolved.storage,
        "target": resolved.to_dict(),
        "input_mode": input_mode,
        "retries": retries,
        "max_concurrency": max_concurrency,
        "idempotency_key": idempotency_key,
    }
    storage = open_storage(resolved.storage or "")
    try:
        storage.write_bytes(
            f"batches/{group_id}/manifest.json", json.dumps(manifest).encode(), create_only=True
        )
    except FileExistsError:
        if idempotency_key is None:
            raise
        manifest = _read_manifest(storage, group_id)
        if manifest["total_expected"] != len(calls):
            raise ConfigError(
                f"Batch {group_id} (idempotency_key {idempotency_key!r}) has "
                f"{manifest['total_expected']} inputs, not {len(calls)}: use a new key for new inputs."
            ) from None
    batch = BatchHandle(manifest, signing_key=resolved.signing_key)
    if not (idempotency_key and batch.cancel_requested):
        batch._start(_Plan(fn, calls, resolved, batch_name, all_tags, max_concurrency))
    return batch


def _read_manifest(storage: Storage, group_id: str) -> dict[str, Any]:
    try:
        return json.loads(storage.read_bytes(f"batches/{group_id}/manifest.json"))
    except FileNotFoundError:
        raise JobNotFound(
            f"No batch {group_id!r} under {storage.uri}. Check the group id and that "
            "KINETIC_STORAGE (or storage=) points at the storage it was submitted to."
        ) from None


def attach_batch(
    group_id: str,
    *,
    target: Target | dict[str, Any] | None = None,
    poll_timeout: float = DEFAULT_POLL_TIMEOUT,
) -> BatchHandle:
    """Rebuild a batch handle in another process. Waits on it default to ``poll_timeout``."""
    validate_id(group_id, "group id")
    resolved = Target.coerce(target).resolve()
    manifest = _read_manifest(open_storage(resolved.storage or ""), group_id)
    return BatchHandle(manifest, signing_key=resolved.signing_key, poll_timeout=poll_timeout)


__all__ = ["BatchHandle", "attach_batch", "submit_map"]
