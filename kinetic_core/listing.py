"""Finding jobs again: ``list_jobs`` (neuro's filters), ``tags()``, and the submit-time
fields they read (``owner``, ``description``).

All filtering lives here, so a storage index can replace the scan of ``jobs/`` later
without touching callers. Cheap filters (name, tags, owner, time) run on the handles
first; a status filter then costs one batched ``resolve_states`` for what is left.
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

from kinetic_core import layout
from kinetic_core.config import Target, validate_tags
from kinetic_core.errors import ConfigError, CorruptRecord, JobNotFound
from kinetic_core.jobs import JobHandle, load_handle
from kinetic_core.states import JobStatus
from kinetic_core.status import resolve_states
from kinetic_core.storage import Storage, open_storage

__all__ = [
    "DESCRIPTION_LIMIT",
    "Query",
    "check_description",
    "list_jobs",
    "parse_when",
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
        self, storage: Storage, signing_key: str | None, errors: list[CorruptRecord] | None
    ) -> list[JobHandle]:
        """The matching jobs in order. With a status filter, one batched resolve of the
        states of every job the other filters kept; without one, nothing is resolved."""
        found = [h for h in _handles(storage, signing_key, errors) if self.match(h)]
        found.sort(key=lambda h: (h.created_at, h.job_id), reverse=not self.reverse)
        if self.statuses is not None and found:
            states = resolve_states(found)
            found = [h for h, s in zip(found, states, strict=True) if s.status in self.statuses]
        return found[: self.limit]


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
) -> list[JobHandle]:
    """Jobs under the storage root, newest first (``reverse=True``: oldest first).

    Filters (all optional, all must match): ``statuses`` (any of them; ``status``: one),
    ``owner``, ``name``, ``tags`` (every given tag), ``since``/``until`` (created then or
    later / then or earlier: epoch seconds, a datetime, ``"2h"``, an ISO date-time).
    ``limit`` applies after filtering and ordering. A bad value raises ConfigError saying
    what is accepted. Only a status filter resolves states: one batched call for the jobs
    the other filters kept. A job whose ``handle.json`` is broken or forged never hides
    the others: it is left out, appended to ``errors`` when given and logged."""
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
    return query.run(open_storage(resolved.storage or ""), resolved.signing_key, errors)


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
