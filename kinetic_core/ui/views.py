"""What the dashboard shows, as JSON-ready dicts, read from the storage root only.

No web framework here: ``app.py`` turns these into responses and pages. Everything goes
through the public API (``list_jobs``, ``attach``, ``resolve_states``, ``read_logs``,
``list_batches``, ``JobHandle.preview``) except the list of a job's output files.

Viewing never executes: a job's result and exception are pickles the job wrote, and
loading one runs the job's code in this server. The pages show what the runner wrote for
viewing instead (``JobHandle.preview``: a bounded repr of the value, the failure as data);
nothing here unpickles, and a page view changes nothing (no job is marked collected). A page of jobs costs one ``list_jobs(limit=...)``, one batched state
resolution of the page's job rows and one status read per batch row.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from threading import Lock
from typing import Any, BinaryIO

import kinetic_core as kc
import kinetic_core.ui.attempts as attempts_of
import kinetic_core.ui.logview as logview
from kinetic_core.data import outputs
from kinetic_core.jobs.listing import INTERNAL_TAG_PREFIX, Query
from kinetic_core.storage import Storage, open_storage

#: Longest text shown of an outcome (characters): a glance, not a download.
RESULT_REPR_LIMIT = 4000
#: Most output files listed on a job's page.
OUTPUTS_LISTED = 500
#: Most jobs one page (or the usage view) reads.
MAX_LIMIT = 1000
DEFAULT_LIMIT = 50
#: Longest log cursor accepted from a client (a merged cursor is small JSON).
CURSOR_LIMIT = 8192
#: Jobs the usage view reads per listing, and at most in all (then it says what it covers).
USAGE_PAGE = 1000
USAGE_JOBS = 20_000
#: Empty pages (every row shown on another) passed over to reach one with a row.
_EMPTY_PAGES_SKIPPED = 20
#: Results of finished jobs kept in memory: a terminal job's result never changes.
_RESULTS_KEPT = 256


class NotFound(kc.KineticError):
    """A path the dashboard refuses to serve (404): no such output file of the job, or a
    job or batch this request may not read (told as an unknown one is)."""


#: Which jobs a request may read: given the request's ASGI scope, a test on a job's (or a
#: batch's) tags. A provider that knows its users passes one to ``create_app`` (Airflow's
#: plugin asks its auth manager per DAG); None: whoever reaches the dashboard reads all.
MayRead = Callable[[Mapping[str, str]], bool]
Readable = Callable[[Mapping[str, Any]], MayRead]


def _everyone(tags: Mapping[str, str]) -> bool:
    return True


@dataclass
class Reader:
    """The storage root the dashboard reads, resolved once; ``may_read`` says which jobs
    (by their tags) the request being answered may read."""

    target: kc.Target
    _results: OrderedDict[str, dict[str, Any]] = field(default_factory=OrderedDict)
    _lock: Lock = field(default_factory=Lock)
    _logs: logview.LogIndexes = field(default_factory=logview.LogIndexes)
    may_read: MayRead = _everyone

    def seen_by(self, may_read: MayRead) -> Reader:
        """This reader for one request's user (the cache of outcomes is shared: an
        outcome is the same whoever reads it; who may read it is asked first)."""
        return replace(self, may_read=may_read)

    @classmethod
    def of(cls, storage: str | None) -> Reader:
        return cls(kc.Target(storage=storage).resolve())

    @property
    def storage_uri(self) -> str:
        return self.target.storage or ""

    def storage(self) -> Storage:
        return open_storage(self.storage_uri)

    # ---- jobs ---------------------------------------------------------------------------
    def jobs(
        self,
        *,
        statuses: list[str] | None = None,
        tags: dict[str, str] | None = None,
        name: str | None = None,
        since: str | None = None,
        until: str | None = None,
        limit: int = DEFAULT_LIMIT,
        every_job: bool = False,
    ) -> dict[str, Any]:
        """One page of rows, newest first: a job with its resolved state, or (unless
        ``every_job``) a batch with its progress, in the place of its newest member that
        matches the filters (its children and its driver job are not rows then, as in
        ``kinetic jobs list``). ``next_until`` is the ``until`` of the next (older) page,
        None on the last. A page whose every job is shown elsewhere (a batch on a newer
        page, a recovery's attempt where its first is) is skipped: no empty page."""
        args: dict[str, Any] = {"statuses": statuses, "tags": tags, "name": name}
        args |= {"since": since, "limit": limit, "every_job": every_job}
        page = self._page(**args, until=until)
        skipped = 0
        while not page["jobs"] and page["next_until"] and skipped < _EMPTY_PAGES_SKIPPED:
            page = self._page(**args, until=page["next_until"])
            skipped += 1
        return page

    def _page(
        self,
        *,
        statuses: list[str] | None,
        tags: dict[str, str] | None,
        name: str | None,
        since: str | None,
        until: str | None,
        limit: int,
        every_job: bool,
    ) -> dict[str, Any]:
        handles = kc.list_jobs(
            statuses=statuses or None,
            tags=tags or None,
            name=name or None,
            since=_when(since),
            until=_when(until),
            limit=limit + 1,
            target=self.target,
            include_batch_children=every_job,
        )
        more = len(handles) > limit
        handles = handles[:limit]
        older = f"{handles[-1].created_at - 1e-6:.6f}" if more and handles else None
        handles = [h for h in handles if self.may_read(h.tags)]  # paging is the store's
        newer, page_end = None, _when(until)
        if page_end is not None:  # not the first page: a batch may be on a newer one
            newer = (Query.of(name=name or None, tags=tags or None), statuses, page_end)
        handles = self._first_attempts(handles)
        batches = {} if every_job else self._batches_of(handles, newer)
        alone = [h for h in handles if h.job_id not in batches]
        resolved = kc.resolve_states(alone) if alone else []
        states = dict(zip([h.job_id for h in alone], resolved, strict=True))
        rows = [
            batches[h.job_id] if h.job_id in batches else _job_row(h, states[h.job_id])
            for h in handles
        ]
        shown = [r for r in rows if r is not None]
        return {"jobs": shown, "count": len(shown), "next_until": older}

    def _first_attempts(self, handles: list[kc.JobHandle]) -> list[kc.JobHandle]:
        """One handle per job: its first attempt's (the id Airflow and Prefect link to),
        listed where that attempt was created; the attempts a recovery started are no
        rows (the oldest attempt left stands for a job whose first was cleaned up)."""
        return [h for h in handles if attempts_of.first_attempt(h, self.target) is h]

    def _batches_of(
        self, handles: list[kc.JobHandle], newer: _Newer | None
    ) -> dict[str, dict[str, Any] | None]:
        """job id -> its batch's row, for each listed batch member (the listing holds one
        member per batch); None for a batch a newer page shows (``newer``: the filters and
        this page's ``until``). A member whose batch record is gone stays a job row."""
        rows: dict[str, dict[str, Any] | None] = {}
        for handle in handles:
            group = kc.batch_of(handle)
            if group is None:
                continue
            try:
                batch = kc.attach_batch(group, target=self.target)
            except kc.JobNotFound:
                continue
            statuses = batch.statuses()
            if newer is not None and _on_a_newer_page(batch, statuses, newer):
                rows[handle.job_id] = None
                continue
            rows[handle.job_id] = {"kind": "batch", "batch_id": group} | _batch_row(batch, statuses)
        return rows

    def attach(self, job_id: str) -> kc.JobHandle:
        """The job, if this request may read it; else the 404 of an unknown job."""
        if self.may_read is _everyone:
            return kc.attach(kc.validate_id(job_id), target=self.target)
        try:
            handle = kc.attach(kc.validate_id(job_id), target=self.target)
        except kc.JobNotFound:
            handle = None
        if handle is None or not self.may_read(handle.tags):
            raise kc.JobNotFound(_unknown("job", job_id))
        return handle

    def job(self, job_id: str) -> dict[str, Any]:
        """Everything the job page shows (state, history, result or error, outputs,
        usage, links); what cannot be read is left empty, never an error page."""
        handle = self.attach(job_id)
        state = handle.state()
        chain = attempts_of.chain(handle, state, self.target)
        newest = chain[-1]
        first = chain[0]
        return {
            **_job_row(first, state),
            "opened_as": handle.job_id,
            "attempts": attempts_of.described(chain),
            "description": handle.description,
            "idempotency_key": handle.idempotency_key,
            "workers": handle.workers,
            "index": handle.index,
            "image": handle.image,
            "spot": handle.spot,
            "location": handle.location,
            "target": kc.Target.from_stored(handle.target).to_dict(),
            "state": state.to_dict(),
            "recovery_note": state.recovery_note,
            "history": [t.to_dict() for t in handle.history()],
            "outcome": self._outcome(handle, newest, state),
            "outputs": self.outputs(newest),
            "links": _links(handle),
            "usage": usage_of(handle),
        }

    def _outcome(
        self, handle: kc.JobHandle, newest: kc.JobHandle, state: kc.JobState
    ) -> dict[str, Any] | None:
        """The result (its preview) of a succeeded job or the error of a failed one; None
        while it runs. Cached: a terminal outcome never changes."""
        if not state.terminal:
            return None
        with self._lock:
            if state.job_id in self._results:
                return self._results[state.job_id]
        outcome = (
            _result(newest.preview(state))
            if state.status is kc.JobStatus.SUCCEEDED
            else _error(handle, state)
        )
        with self._lock:
            self._results[state.job_id] = outcome
            while len(self._results) > _RESULTS_KEPT:
                self._results.popitem(last=False)
        return outcome

    # ---- outputs ------------------------------------------------------------------------
    def _place(self, handle: kc.JobHandle) -> outputs.Place:
        return outputs.place(self.storage(), handle.job_id, handle.target.get("output_dir"))

    def outputs(self, handle: kc.JobHandle) -> list[dict[str, Any]]:
        """The job's synced output files (the first ``OUTPUTS_LISTED``), relative paths."""
        try:
            where = self._place(handle)
            return [{"path": p} for p in where.storage.walk(where.prefix)[:OUTPUTS_LISTED]]
        except (kc.KineticError, OSError):
            return []

    def open_output(self, job_id: str, path: str) -> tuple[str, Iterator[bytes]]:
        """(name, chunks) of one output file of the job's newest attempt. Only a path the
        job's own listing holds is served, and on local storage only a file whose real
        path stays inside the job's folder (no ``..``, no link out of it)."""
        handle = self.attach(job_id)
        state = handle.state()
        newest = handle if state.job_id == handle.job_id else self.attach(state.job_id)
        where = self._place(newest)
        if not path or path.startswith("/") or ".." in path.split("/"):
            raise NotFound(f"{path!r} is not an output file of job {job_id}.")
        if path not in where.storage.walk(where.prefix):
            raise NotFound(f"{path!r} is not an output file of job {job_id}.")
        key = f"{where.prefix}/{path}"
        local = where.storage.local_path(key)
        if local is not None:
            base = os.path.realpath(where.storage.local_path(where.prefix) or "")
            if not os.path.realpath(local).startswith(base + os.sep):
                raise NotFound(f"{path!r} leads outside the outputs of job {job_id}.")
        return os.path.basename(path), _chunks(where.storage, key)

    # ---- logs ---------------------------------------------------------------------------
    def _attempt(
        self, job_id: str, attempt: int | None
    ) -> tuple[kc.JobHandle, list[kc.JobHandle], kc.JobState]:
        """(the attempt asked for, every attempt, the job's state): attempt ``attempt``
        of the job (None: its newest)."""
        handle = self.attach(job_id)
        state = handle.state()
        chain = attempts_of.chain(handle, state, self.target)
        return attempts_of.pick(chain, attempt), chain, state

    def _log_facts(
        self, picked: kc.JobHandle, chain: list[kc.JobHandle], state: kc.JobState
    ) -> dict[str, Any]:
        """What a log answer says of the attempt read: which, of how many, ended or not
        (an attempt a recovery followed has ended)."""
        newest = chain[-1]
        return {
            "job_id": picked.job_id,
            "attempt": picked.attempt,
            "latest": newest.attempt,
            "attempts": attempts_of.described(chain),
            "workers": picked.workers,
            "status": state.status.value,
            "done": picked.job_id != newest.job_id or state.terminal,
        }

    def _reader(self, handle: kc.JobHandle, worker: int | None) -> logview.Read:
        def read(cursor: str | None) -> tuple[str, str | None]:
            return handle.read_logs(cursor, worker=worker)

        return read

    def log_part(
        self, job_id: str, attempt: int | None, worker: int | None, part: int | None, offset: int
    ) -> dict[str, Any]:
        """Part ``part`` (None: the last) of an attempt's log from character ``offset``
        (``logview``): the page opens on the tail and loads earlier parts on demand."""
        picked, chain, state = self._attempt(job_id, attempt)
        _check_worker(picked, worker)
        index = self._logs.of((self.storage_uri, picked.job_id, worker))
        try:
            answer = logview.part(index, self._reader(picked, worker), part, offset)
        except IndexError as exc:
            raise kc.ConfigError(str(exc)) from None
        return {**self._log_facts(picked, chain, state), "worker": worker, **answer}

    def log_search(
        self, job_id: str, attempt: int | None, worker: int | None, query: str
    ) -> dict[str, Any]:
        """The lines of an attempt's log holding ``query`` (any case), by part."""
        if not query or len(query) > logview.QUERY_LIMIT:
            raise kc.ConfigError(f"q must be 1 to {logview.QUERY_LIMIT} characters of text.")
        picked, chain, state = self._attempt(job_id, attempt)
        _check_worker(picked, worker)
        index = self._logs.of((self.storage_uri, picked.job_id, worker))
        found = logview.search(index, self._reader(picked, worker), query)
        return {**self._log_facts(picked, chain, state), "query": query, **found}

    def log_download(
        self, job_id: str, attempt: int | None, worker: int | None
    ) -> tuple[str, Iterator[bytes]]:
        """(file name, chunks) of an attempt's whole log as it is now."""
        picked, _, _ = self._attempt(job_id, attempt)
        _check_worker(picked, worker)
        name = f"{picked.job_id}" + (f"-worker{worker}" if worker is not None else "") + ".log"
        return name, logview.stream(self._reader(picked, worker))

    def logs(
        self, job_id: str, cursor: str | None, worker: int | None, attempt: int | None = None
    ) -> dict[str, Any]:
        """Log text after ``cursor`` and the next cursor (``JobHandle.read_logs``) of
        attempt ``attempt`` (None: the newest), and whether that attempt has ended (the
        client stops following once ``done`` and empty)."""
        if cursor is not None and len(cursor) > CURSOR_LIMIT:
            raise kc.ConfigError("cursor is too long: pass the cursor a read returned.")
        handle, chain, state = self._attempt(job_id, attempt)
        done = handle.job_id != chain[-1].job_id or state.terminal
        try:
            text, after = handle.read_logs(cursor or None, worker=worker)
        except (ValueError, OSError) as exc:
            raise kc.ConfigError(
                f"{cursor!r} is not a log cursor of job {job_id} ({exc}); pass the cursor "
                "a read returned, or none."
            ) from None
        return {
            "job_id": handle.job_id,
            "attempt": handle.attempt,
            "text": text,
            "cursor": after,
            "worker": worker,
            "workers": handle.workers,
            "status": state.status.value,
            "done": done,
        }

    # ---- batches ------------------------------------------------------------------------
    def batches(self, limit: int = DEFAULT_LIMIT) -> dict[str, Any]:
        found = kc.list_batches(target=self.target, limit=limit)
        shown = [b for b in found if self.may_read(b.tags)]
        return {"batches": [_batch_row(b, b.statuses()) for b in shown]}

    def attach_batch(self, group_id: str) -> kc.BatchHandle:
        """The batch, if this request may read it; else the 404 of an unknown batch."""
        if self.may_read is _everyone:
            return kc.attach_batch(kc.validate_id(group_id, "group id"), target=self.target)
        try:
            batch = kc.attach_batch(kc.validate_id(group_id, "group id"), target=self.target)
        except kc.JobNotFound:
            batch = None
        if batch is None or not self.may_read(batch.tags):
            raise kc.JobNotFound(_unknown("batch", group_id))
        return batch

    def batch(self, group_id: str) -> dict[str, Any]:
        """The batch's progress, every child's status and the failed children's errors."""
        batch = self.attach_batch(group_id)
        statuses = batch.statuses()
        jobs = batch.jobs
        failed = batch.failed_children()
        reports = batch.failure_reports(failed)
        return {
            **_batch_row(batch, statuses),
            "children": [
                {"index": i, "job_id": j.job_id if j else None, "status": s.value}
                for i, (j, s) in enumerate(zip(jobs, statuses, strict=True))
            ],
            "failed": [
                {
                    "index": f.index,
                    "job_id": f.job.job_id if f.job else None,
                    "status": f.status.value,
                    "reason": f.reason,
                    "message": f.message,
                    "error": _truncate(reports.get(f.index) or f.message or ""),
                }
                for f in failed
            ],
        }

    # ---- usage --------------------------------------------------------------------------
    def usage(
        self, *, since: str | None = "7d", tags: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """Chip-hours per day and per tag, useful vs lost, and running hours (a CPU-only
        job uses no chips but runs), over every job created since ``since``: read page by
        page, each job once with all its attempts. Past ``USAGE_JOBS`` jobs it stops and
        ``covered`` says so (the newest ones, from when). ``available`` is False where this
        version records no usage (no ``JobHandle.usage``)."""
        start = _when(since)
        handles, complete = self._every_job(start, tags)
        days: dict[str, dict[str, float]] = {}
        by_tag: dict[str, dict[str, float]] = {}
        total = _zero()
        available = False
        for handle in handles:
            usage = usage_of(handle)
            if usage is None:
                continue
            available = True
            day = datetime.fromtimestamp(handle.created_at, UTC).date().isoformat()
            _add(days.setdefault(day, _zero()), usage)
            _add(total, usage)
            for key, value in handle.tags.items():
                if not key.startswith(INTERNAL_TAG_PREFIX):
                    _add(by_tag.setdefault(f"{key}={value}", _zero()), usage)
        oldest = min((h.created_at for h in handles), default=None)
        return {
            "available": available,
            "jobs": len(handles),
            "covered": {
                "since": _iso(start),
                "complete": complete,
                "oldest": _iso(oldest),
                "limit": USAGE_JOBS,
            },
            "total": total,
            "days": [{"day": d, **v} for d, v in sorted(days.items())],
            "tags": [{"tag": t, **v} for t, v in sorted(by_tag.items())],
        }

    def _every_job(
        self, since: float | None, tags: dict[str, str] | None
    ) -> tuple[list[kc.JobHandle], bool]:
        """(the jobs created since ``since`` this request may read, newest first, one
        handle per job; whether that is all of them: False past ``USAGE_JOBS``)."""
        found: list[kc.JobHandle] = []
        until: float | None = None
        while True:
            page = kc.list_jobs(
                since=since,
                until=until,
                tags=tags or None,
                limit=USAGE_PAGE,
                target=self.target,
                include_batch_children=True,
            )
            readable = [h for h in page if self.may_read(h.tags)]
            found += self._first_attempts(readable)
            if len(found) >= USAGE_JOBS:
                return found[:USAGE_JOBS], False
            if len(page) < USAGE_PAGE:
                return found, True
            until = page[-1].created_at - 1e-6

    # ---- actions ------------------------------------------------------------------------
    def cancel_job(self, job_id: str) -> dict[str, Any]:
        handle = self.attach(job_id)
        decided = handle.cancel()
        return {"job_id": handle.job_id, "cancelled": decided, "status": handle.status().value}

    def cancel_batch(self, group_id: str) -> dict[str, Any]:
        batch = self.attach_batch(group_id)
        batch.cancel()
        return {"group_id": batch.group_id, "cancel_requested": batch.cancel_requested}


# ---- helpers ------------------------------------------------------------------------------
#: A later page's view of the newer ones: the listing's name/tag filters, its statuses
#: and the page's ``until``.
_Newer = tuple[Query, list[str] | None, float]


def _on_a_newer_page(batch: kc.BatchHandle, statuses: list[kc.ChildStatus], newer: _Newer) -> bool:
    """Whether a newer page already showed this batch: one of its children (latest
    attempts) created after this page's ``until`` matches the filters. The listing puts
    a batch in the place of its newest matching member, so a later page meets its older
    members again."""
    query, wanted, until = newer
    return any(
        job is not None
        and job.created_at > until
        and query.match(job)
        and (not wanted or status.value in {w.upper() for w in wanted})
        for job, status in zip(batch.jobs, statuses, strict=True)
    )


_USAGE_KEYS = (
    "chip_hours",
    "useful_chip_hours",
    "lost_chip_hours",
    "queued_seconds",
    "running_seconds",
    "cost",
)


def usage_of(handle: kc.JobHandle) -> dict[str, Any] | None:
    """``handle.usage().to_dict()`` where this version records usage, else None (never an
    error: a job without records has no usage to show)."""
    reader = getattr(handle, "usage", None)
    if reader is None:
        return None
    try:
        data = reader().to_dict()
    except Exception:
        return None
    return data if isinstance(data, dict) else None


def _zero() -> dict[str, float]:
    return dict.fromkeys((*_USAGE_KEYS, "running_hours"), 0.0)


def _add(into: dict[str, float], usage: dict[str, Any]) -> None:
    for key in _USAGE_KEYS:
        value = usage.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            into[key] += float(value)
    into["running_hours"] = into["running_seconds"] / 3600


def _when(value: str | None) -> float | None:
    """A ``since``/``until`` query value as epoch seconds (``kc.parse_when`` forms)."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        return kc.parse_when(float(text))
    except ValueError:
        return kc.parse_when(text)


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, UTC).isoformat() if ts else None


def _job_row(handle: kc.JobHandle, state: kc.JobState) -> dict[str, Any]:
    """One line of the jobs table."""
    return {
        "kind": "job",
        "job_id": handle.job_id,
        "name": handle.name,
        "owner": handle.owner,
        "status": state.status.value,
        "reason": state.reason,
        "message": state.message,
        "created_at": _iso(handle.created_at),
        "started_at": state.started_at.isoformat() if state.started_at else None,
        "finished_at": state.finished_at.isoformat() if state.finished_at else None,
        "duration": _duration(state),
        "attempt": state.attempt,
        "recoveries": state.recoveries,
        "backend": handle.target.get("backend") or "local",
        "accelerator": handle.accelerator,
        "group_id": handle.group_id,
        "tags": {k: v for k, v in handle.tags.items() if not k.startswith(INTERNAL_TAG_PREFIX)},
    }


def _duration(state: kc.JobState) -> float | None:
    """Seconds from start to end (a running job: to now); None before it started."""
    if state.started_at is None:
        return None
    end = state.finished_at or datetime.now(UTC)
    return max(0.0, (end - state.started_at).total_seconds())


#: The columns the jobs list sorts by (``?sort=``), newest/longest first unless ``order=asc``.
SORTS = ("created", "ended", "duration", "name", "status")


def sort_rows(rows: list[dict[str, Any]], key: str, ascending: bool) -> list[dict[str, Any]]:
    """The page's rows ordered by a column; rows without the value go last either way."""
    if key not in SORTS:
        raise kc.ConfigError(f"sort must be one of {', '.join(SORTS)}, got {key!r}.")
    field_of = {"created": "created_at", "ended": "finished_at"}.get(key, key)
    have = [r for r in rows if r.get(field_of) is not None]
    rest = [r for r in rows if r.get(field_of) is None]
    have.sort(key=lambda r: r[field_of], reverse=not ascending)
    return have + rest


def _batch_row(batch: kc.BatchHandle, statuses: list[kc.ChildStatus]) -> dict[str, Any]:
    counts: dict[str, int] = {}
    for s in statuses:
        counts[s.value] = counts.get(s.value, 0) + 1
    done = sum(1 for s in statuses if s.terminal)
    return {
        "group_id": batch.group_id,
        "name": batch.name,
        "total": batch.total,
        "created_at": batch.created_at.isoformat(),
        "tags": {k: v for k, v in batch.tags.items() if not k.startswith(INTERNAL_TAG_PREFIX)},
        "counts": counts,
        "done": done,
        "cancel_requested": batch.cancel_requested,
    }


def _check_worker(handle: kc.JobHandle, worker: int | None) -> None:
    if worker is not None and not 0 <= worker < handle.workers:
        raise kc.ConfigError(
            f"worker must be from 0 to {handle.workers - 1} for job {handle.job_id}, got {worker}."
        )


def _unknown(kind: str, name: str) -> str:
    """What a request is told of a job or batch it may not read: what an unknown one's
    404 says, so a page does not tell which ids exist."""
    return f"No {kind} {name!r} here that you may read."


def _links(handle: kc.JobHandle) -> dict[str, str]:
    try:
        return kc.job_links(handle)
    except kc.KineticError:
        return {}


def _result(shown: kc.Preview | None) -> dict[str, Any]:
    """A succeeded job's value as the runner previewed it (never the value itself)."""
    if shown is None:
        return {"kind": "result", "available": False, "text": "no result stored"}
    if not shown.available:
        return {"kind": "result", "available": False, "text": shown.note}
    return {
        "kind": "result",
        "available": True,
        "text": _truncate(shown.text),
        "type": shown.type_name,
        "note": shown.note,
    }


def _error(handle: kc.JobHandle, state: kc.JobState) -> dict[str, Any]:
    """A failed or cancelled job's story: status, reason, remote exception with its
    traceback and log tail (``describe_failure`` over ``failure_data``: read as data,
    never unpickled)."""
    if state.status is kc.JobStatus.CANCELLED:
        return {"kind": "cancelled", "text": state.message or "cancelled"}
    try:
        exc = kc.failure_data(handle)
        kind = exc.type_name.rsplit(".", 1)[-1] if isinstance(exc, kc.RemoteError) else ""
        # the page's state line says status, reason and message, and its log box holds the
        # log: the outcome is the traceback, once (or, without one, what is known)
        traceback = exc.remote_traceback if isinstance(exc, kc.RemoteError) else ""
        text = traceback.rstrip() or kc.describe_failure(handle, exc, log_tail="")
    except Exception as exc:  # a job whose evidence is gone: say what is known
        text = f"{state.status.value} ({state.reason}): {state.message}"
        kind = f"not readable ({type(exc).__name__})"
    return {"kind": "error", "type": kind, "text": _truncate(text, 20000)}


def _truncate(text: str, limit: int = RESULT_REPR_LIMIT) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text) - limit} more)"


def _chunks(storage: Storage, key: str, size: int = 1 << 16) -> Iterator[bytes]:
    """Stream one stored file (never read whole into memory)."""
    with storage.open_read(key) as fh:
        yield from _read(fh, size)


def _read(fh: BinaryIO, size: int) -> Iterator[bytes]:
    while piece := fh.read(size):
        yield piece
