"""Finding jobs again: ``list_jobs`` (neuro's filters), ``tags()``, and the submit-time
fields they read (``owner``, ``description``).

All filtering lives here. Where the store has a job index (``job_index``) the newest page
is read from it bucket by bucket; otherwise ``jobs/`` is scanned. Cheap filters (name,
tags, owner, time) run on the handles first; a status filter then costs one batched
``resolve_states`` for what the index does not settle. ``repair_index`` builds the index
of a store written by older versions.
"""

from __future__ import annotations

import getpass
import logging
import os
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kinetic_core.config.target import Target, validate_tags
from kinetic_core.control.resolution import resolve_states
from kinetic_core.errors import ConfigError, CorruptRecord, JobNotFound
from kinetic_core.jobs.handle import JobHandle, load_handle
from kinetic_core.records import job_index, layout
from kinetic_core.records.lifecycle import read_outcome
from kinetic_core.states import JobStatus
from kinetic_core.storage import Storage, open_storage
from kinetic_core.util.parallel import parallel

__all__ = [
    "DESCRIPTION_LIMIT",
    "Query",
    "RepairReport",
    "batch_of",
    "check_description",
    "list_jobs",
    "parse_when",
    "repair_index",
    "resolve_owner",
    "tags",
]

log = logging.getLogger(__name__)

#: Longest ``description=`` accepted (characters): a note for people, not a payload.
DESCRIPTION_LIMIT = 1000
OWNER_LIMIT = 256
#: Tags kinetic sets itself (batch index, group id, driver): left out of ``tags()``.
INTERNAL_TAG_PREFIX = "kinetic/"

When = float | int | datetime | str
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_RELATIVE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)
WHEN_FORMS = (
    "an epoch time in seconds (1764000000), a datetime, a duration back from now (30m, 2h, "
    "7d, also s and w), or an ISO date or date-time (2026-11-25, 2026-11-25T14:30, with an "
    "optional UTC offset; without one it is local time)"
)


# ---- submit-time fields ------------------------------------------------------------------


def resolve_owner(owner: str | None) -> str:
    """Who a job belongs to: ``owner=``, else ``KINETIC_OWNER``, else the submitting user
    (``getpass.getuser()``; ``uid{N}`` where no user name exists, e.g. a container's
    arbitrary uid). ConfigError for a value that is not a short single-line string."""
    chosen = owner if owner is not None else os.environ.get("KINETIC_OWNER") or _login()
    if not isinstance(chosen, str) or not chosen.strip():
        raise ConfigError(f"owner must be a non-empty string (a user or team), got {chosen!r}.")
    if len(chosen) > OWNER_LIMIT or not chosen.isprintable():
        raise ConfigError(
            f"owner must be one line of at most {OWNER_LIMIT} printable characters, got "
            f"{chosen[:40]!r}{'...' if len(chosen) > 40 else ''}."
        )
    return chosen.strip()


def _login() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no USER/LOGNAME and no passwd entry for this uid (KeyError, OSError)
        return f"uid{os.getuid()}" if hasattr(os, "getuid") else "unknown"


def check_description(description: str | None) -> str:
    """``description=`` as stored: free text up to ``DESCRIPTION_LIMIT`` characters."""
    if description is None:
        return ""
    if not isinstance(description, str):
        raise ConfigError(f"description must be a string, got {type(description).__name__}.")
    if len(description) > DESCRIPTION_LIMIT:
        raise ConfigError(
            f"description is {len(description)} characters; at most {DESCRIPTION_LIMIT} are "
            "kept with the job. Shorten it (put long notes in the job's outputs)."
        )
    return description


# ---- filter values -----------------------------------------------------------------------


def parse_when(value: When, *, name: str = "since", now: float | None = None) -> float:
    """An epoch time from what ``since``/``until`` accept (``WHEN_FORMS``); ConfigError
    naming ``name`` and the accepted forms otherwise."""
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value == value and abs(value) != float("inf"):  # not NaN, finite
            return float(value)
    elif isinstance(value, str):
        relative = _RELATIVE.match(value)
        if relative:
            amount = float(relative.group(1)) * _UNITS[relative.group(2).lower()]
            return (time.time() if now is None else now) - amount
        try:
            return datetime.fromisoformat(value.strip()).timestamp()
        except ValueError:
            pass
    raise ConfigError(f"{name}={value!r} is not a time: use {WHEN_FORMS}.")


def _statuses(
    status: JobStatus | str | None, statuses: Iterable[JobStatus | str] | None
) -> set[JobStatus] | None:
    """The statuses asked for (``status`` and ``statuses`` together), None for any."""
    if status is None and statuses is None:
        return None
    wanted = [] if status is None else [status]
    if statuses is not None:
        wanted += [statuses] if isinstance(statuses, str) else list(statuses)
    valid = ", ".join(s.value for s in JobStatus)
    out = set()
    for s in wanted:
        try:
            out.add(JobStatus(s.upper() if isinstance(s, str) else s))
        except ValueError:
            raise ConfigError(f"{s!r} is not a job status: use one of {valid}.") from None
    return out


def _limit(limit: int | None) -> int | None:
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"limit must be a whole number >= 1 (or None for all), got {limit!r}.")
    return limit


@dataclass(frozen=True)
class Query:
    """One listing's filters, checked: what a handle must match before its state is
    resolved (``match``), then the statuses, order and count."""

    owner: str | None = None
    name: str | None = None
    tags: tuple[tuple[str, str], ...] = ()
    since: float | None = None
    until: float | None = None
    statuses: frozenset[JobStatus] | None = None
    reverse: bool = False
    limit: int | None = None

    @classmethod
    def of(
        cls,
        *,
        status: JobStatus | str | None = None,
        statuses: Iterable[JobStatus | str] | None = None,
        owner: str | None = None,
        name: str | None = None,
        tags: dict[str, str] | None = None,
        since: When | None = None,
        until: When | None = None,
        reverse: bool = False,
        limit: int | None = None,
    ) -> Query:
        wanted = _statuses(status, statuses)
        for field, value in (("owner", owner), ("name", name)):
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"{field} must be a string, got {type(value).__name__}.")
        return cls(
            owner=owner,
            name=name,
            tags=tuple(validate_tags(tags or {}).items()),
            since=None if since is None else parse_when(since, name="since"),
            until=None if until is None else parse_when(until, name="until"),
            statuses=None if wanted is None else frozenset(wanted),
            reverse=bool(reverse),
            limit=_limit(limit),
        )

    def match(self, h: JobHandle) -> bool:
        return (
            (self.name is None or h.name == self.name)
            and (self.owner is None or h.owner == self.owner)
            and all(h.tags.get(k) == v for k, v in self.tags)
            and (self.since is None or h.created_at >= self.since)
            and (self.until is None or h.created_at <= self.until)
        )

    def run(
        self,
        storage: Storage,
        signing_key: str | None,
        errors: list[CorruptRecord] | None,
        *,
        batch_children: bool = True,
    ) -> list[JobHandle]:
        """The matching jobs in order: from the index where the store has one (the newest
        page costs a few LISTs and one read per job shown), else by scanning ``jobs/``.
        ``batch_children=False``: each batch once, as its first matching member."""
        if job_index.is_complete(storage):
            return _Walk(self, storage, signing_key, errors, batch_children).run()
        everything = list(_handles(storage, signing_key, errors))
        if job_index.covers(storage, [(h.job_id, h.created_at) for h in everything]):
            job_index.mark_complete(storage)  # only this version wrote here: pages from now
        else:
            log.info(
                "kinetic: %s has jobs without index entries (written by an older version): "
                "listing reads every job; run `kinetic jobs reindex` once to list in pages",
                storage.uri,
            )
        return self._filtered(everything, batch_children)

    def scan(
        self,
        storage: Storage,
        signing_key: str | None,
        errors: list[CorruptRecord] | None,
        *,
        batch_children: bool = True,
    ) -> list[JobHandle]:
        """The full scan of ``jobs/`` (a store without an index): every handle read; with
        a status filter, one batched resolve of what the other filters kept."""
        return self._filtered(list(_handles(storage, signing_key, errors)), batch_children)

    def _filtered(self, handles: list[JobHandle], batch_children: bool) -> list[JobHandle]:
        found = [h for h in handles if self.match(h)]
        # The index's order (milliseconds, then id): two jobs created in one millisecond
        # list in the same order whether the store is scanned or indexed.
        found.sort(key=lambda h: (int(h.created_at * 1000), h.job_id), reverse=not self.reverse)
        if self.statuses is not None and found:
            states = resolve_states(found)
            found = [h for h, s in zip(found, states, strict=True) if s.status in self.statuses]
        if not batch_children:
            found = _one_per_batch(found, set())
        return found[: self.limit]


def batch_of(handle: JobHandle) -> str | None:
    """The batch (``group_id``) a job belongs to, as a child or as the batch's driver job;
    None for a job submitted on its own."""
    return job_index.batch_group(handle.tags)


def _one_per_batch(handles: list[JobHandle], seen: set[str]) -> list[JobHandle]:
    """Jobs in order, each batch's members after its first left out (``seen``: batches
    already shown, updated)."""
    out = []
    for h in handles:
        group = batch_of(h)
        if group is None or group not in seen:
            out.append(h)
            if group is not None:
                seen.add(group)
    return out


class _Walk:
    """One indexed listing: buckets newest first, candidates read a page at a time."""

    def __init__(
        self,
        query: Query,
        storage: Storage,
        signing_key: str | None,
        errors: list[CorruptRecord] | None,
        batch_children: bool,
    ) -> None:
        self.query, self.storage, self.key, self.errors = query, storage, signing_key, errors
        self.batch_children = batch_children
        self.page: list[JobHandle] = []
        self.seen: set[str] = set()

    def run(self) -> list[JobHandle]:
        q = self.query
        for bucket in job_index.walk(
            self.storage, since=q.since, until=q.until, newest_first=not q.reverse
        ):
            todo = [e for e in bucket if self._candidate(e)]
            while todo and not self._full():
                need = len(todo) if q.limit is None else q.limit - len(self.page)
                chunk, todo = todo[:need], todo[need:]
                self._take([e for e in chunk if self._candidate(e)])
            if self._full():
                break
        return self.page

    def _full(self) -> bool:
        return self.query.limit is not None and len(self.page) >= self.query.limit

    def _candidate(self, e: job_index.Entry) -> bool:
        """Worth reading? Not a member of a batch already shown, nor a job that ended in
        a status the filter does not want (known from the entry's name alone)."""
        if not self.batch_children and e.group is not None and e.group in self.seen:
            return False
        wanted = self.query.statuses
        return wanted is None or not e.settled or JobStatus(str(e.end)) in wanted

    def _take(self, chunk: list[job_index.Entry]) -> None:
        """Read the chunk's handles (the truth; ghosts dropped), keep what matches, and
        resolve the states of those whose end the index does not settle, in one batch."""
        read: list[JobHandle | None] = [None] * len(chunk)

        def load(i: int) -> None:
            read[i] = self._read(chunk[i])

        parallel(load, range(len(chunk)))  # one round trip's latency for the page on GCS
        rows = [
            (e, h)
            for e, h in zip(chunk, read, strict=True)
            if h is not None and self.query.match(h)
        ]
        if self.query.statuses is not None:
            rows = self._by_status(rows, self.query.statuses)
        handles = [h for _, h in rows]
        if not self.batch_children:
            handles = _one_per_batch(handles, self.seen)
        self.page.extend(
            handles[: None if self.query.limit is None else self.query.limit - len(self.page)]
        )

    def _by_status(
        self, rows: list[tuple[job_index.Entry, JobHandle]], wanted: frozenset[JobStatus]
    ) -> list[tuple[job_index.Entry, JobHandle]]:
        """The rows in a wanted status: an ended job's from its entry, the others' from
        one batched resolve (a job found ended gets the entry it lacked: lazy repair)."""
        open_ = [h for e, h in rows if not e.settled]
        states = dict(
            zip([h.job_id for h in open_], resolve_states(open_) if open_ else [], strict=True)
        )
        kept = []
        for e, h in rows:
            state = states.get(h.job_id)
            if state is None:
                status = JobStatus(str(e.end))
            else:
                status = state.status
                if state.terminal and state.job_id == h.job_id and e.end is None:
                    job_index.note_end(self.storage, h.job_id, h.created_at, status.value)
            if status in wanted:
                kept.append((e, h))
        return kept

    def _read(self, e: job_index.Entry) -> JobHandle | None:
        """The entry's job, or None: a ghost (no such job, or an entry a racing creator
        left with another time) is dropped and deleted; a broken handle is reported."""
        try:
            h = load_handle(self.storage, e.job_id, self.key)
        except CorruptRecord as exc:
            log.warning("kinetic: skipping job %s: %s", e.job_id, exc)
            if self.errors is not None:
                self.errors.append(exc)
            return None
        except (JobNotFound, ValueError, TypeError):
            job_index.drop(self.storage, e, stale=False)
            return None
        if int(h.created_at * 1000) != e.ms:
            job_index.drop(self.storage, e, stale=True)
            return None
        return h


# ---- listing -----------------------------------------------------------------------------


def _handles(
    storage: Storage, signing_key: str | None, errors: list[CorruptRecord] | None
) -> Iterator[JobHandle]:
    """Every loadable handle under the root. A broken or forged ``handle.json`` never hides
    the others: it is left out, logged, and appended to ``errors`` when given."""
    for job_id in storage.list_names(layout.JOBS):
        try:
            yield load_handle(storage, job_id, signing_key)
        except CorruptRecord as exc:
            log.warning("kinetic: skipping job %s: %s", job_id, exc)
            if errors is not None:
                errors.append(exc)
        except (JobNotFound, ValueError, TypeError):
            continue  # a job being submitted right now, or a stray folder


def list_jobs(
    *,
    status: JobStatus | str | None = None,
    statuses: Iterable[JobStatus | str] | None = None,
    owner: str | None = None,
    name: str | None = None,
    tags: dict[str, str] | None = None,
    since: When | None = None,
    until: When | None = None,
    reverse: bool = False,
    limit: int | None = None,
    target: Target | dict[str, Any] | None = None,
    errors: list[CorruptRecord] | None = None,
    include_batch_children: bool = True,
) -> list[JobHandle]:
    """Jobs under the storage root, newest first (``reverse=True``: oldest first).

    Filters (all optional, all must match): ``statuses`` (any of them; ``status``: one),
    ``owner``, ``name``, ``tags`` (every given tag), ``since``/``until`` (created then or
    later / then or earlier: epoch seconds, a datetime, ``"2h"``, an ISO date-time).
    ``limit`` applies after filtering and ordering. A bad value raises ConfigError saying
    what is accepted. Only a status filter resolves states: one batched call for the jobs
    the other filters kept. A job whose ``handle.json`` is broken or forged never hides
    the others: it is left out, appended to ``errors`` when given and logged.

    ``include_batch_children=False`` lists each batch once, in the place of its newest
    matching member (a child or the batch's driver job; ``batch_of(handle)`` names the
    batch), and counts it once against ``limit``: what ``kinetic jobs list`` shows.

    Cost (docs/concepts.md, Listing): with the store's index, the newest page is a few
    LISTs plus one read per job shown; a status filter reads the status of ended jobs
    from the index and resolves the others of the page in one batch. A store written by
    older versions is scanned whole until ``repair_index`` (``kinetic jobs reindex``)."""
    query = Query.of(
        status=status,
        statuses=statuses,
        owner=owner,
        name=name,
        tags=tags,
        since=since,
        until=until,
        reverse=reverse,
        limit=limit,
    )
    resolved = Target.coerce(target).resolve()
    storage = open_storage(resolved.storage or "")
    return query.run(
        storage, resolved.signing_key, errors, batch_children=bool(include_batch_children)
    )


def tags(
    *, target: Target | dict[str, Any] | None = None, internal: bool = False
) -> dict[str, list[str]]:
    """Every tag in use under the storage root: tag -> its values, sorted (for shell
    completion of ``--tag KEY=VALUE`` and for people). kinetic's own ``kinetic/...`` tags
    (batch index, group id) are left out unless ``internal=True``."""
    resolved = Target.coerce(target).resolve()
    storage = open_storage(resolved.storage or "")
    seen: dict[str, set[str]] = {}
    for handle in _handles(storage, resolved.signing_key, None):
        for key, value in handle.tags.items():
            if internal or not key.startswith(INTERNAL_TAG_PREFIX):
                seen.setdefault(key, set()).add(value)
    return {key: sorted(values) for key, values in sorted(seen.items())}


# ---- repair ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RepairReport:
    """What ``repair_index`` did: jobs seen under ``jobs/``, entries it had to write."""

    jobs: int
    created: int
    ended: int


def repair_index(*, target: Target | dict[str, Any] | None = None) -> RepairReport:
    """Give every job under ``jobs/`` its index entries (create-only: the ones there stay)
    and mark the index complete, so listing reads pages from then on. For a store written
    by older versions, once; safe to run at any time, also while jobs are submitted
    (they index themselves). Reads every handle: O(jobs), like the scan it replaces."""
    resolved = Target.coerce(target).resolve()
    storage = open_storage(resolved.storage or "")
    names = storage.list_names(layout.JOBS)
    created: list[str] = []
    ended: list[str] = []

    def repair(job_id: str) -> None:
        try:
            handle = load_handle(storage, job_id, resolved.signing_key)
        except (JobNotFound, ValueError, TypeError):
            return  # a broken handle or a stray folder: listing never shows it either
        group = job_index.batch_group(handle.tags)
        suffix = f".{job_index.BATCH}{group}" if group else ""
        if not storage.exists(layout.index_entry(handle.created_at, job_id, suffix)):
            job_index.note_created(storage, handle.record())
            created.append(job_id)
        outcome = read_outcome(storage, job_id)
        if outcome is not None:
            status = str(outcome["status"])
            end = f".{job_index.END}{status.lower()}"
            if not storage.exists(layout.index_entry(handle.created_at, job_id, end)):
                job_index.note_end(storage, job_id, handle.created_at, status)
                ended.append(job_id)

    parallel(repair, names)
    job_index.mark_complete(storage)
    return RepairReport(jobs=len(names), created=len(created), ended=len(ended))
