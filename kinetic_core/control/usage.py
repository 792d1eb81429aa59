"""Usage: what a job's attempts used (chips, hours, queueing) and, with a price table, cost.

Per attempt: the accelerator and its chips over all hosts (the catalogue's shape: chips per
host x hosts; GPUs count as chips; a CPU-only or local job uses 0 chips), spot or not, the
seconds it waited before it ran (created -> started: scheduling, Kueue admission, image
pull), the seconds it ran (started -> finished, or its outcome; a running attempt: until
now), chip-hours = chips x running hours, and how it ended.

Recorded once: when an attempt is terminal its first reader writes ``jobs/{id}/usage.json``
create-only (job id inside, HMAC when a signing key is set), so later readers read it
instead of recomputing, and it outlives the history records a cleanup may drop. A record
that names another job or fails its signature is ignored (recomputed, never trusted).

A job's ``Usage`` sums its recovered attempts and splits chip-hours into useful and lost:
lost are the attempts that ended ``Preempted``/``Lost`` and the failed attempts a recovery
or retry redid (a next attempt of the job's key exists). Cost needs a price table
(``Target.prices``, ``KINETIC_PRICES``): kinetic ships no prices.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from typing import Any

from kinetic_core.backends import shape_of
from kinetic_core.config.target import price_table as check_prices
from kinetic_core.control import recovery
from kinetic_core.errors import StorageError
from kinetic_core.records import layout
from kinetic_core.records.lifecycle import read_json, read_outcome
from kinetic_core.states import JobStatus, recoverable_reason
from kinetic_core.storage import Storage, open_storage
from kinetic_core.util import signing

__all__ = [
    "AttemptUsage",
    "Usage",
    "combine",
    "job_usage",
    "per_job",
    "prices_for",
    "usage_summary",
]

log = logging.getLogger(__name__)

USAGE_VERSION = 1
PRICES_ENV = "KINETIC_PRICES"
_FAMILY = re.compile(r"^(gpu-[a-z0-9-]+?)x\d+$|^(tpu-[a-z0-9]+)-\d+$")


@dataclass(frozen=True)
class AttemptUsage:
    """What one attempt used. ``chips`` 0: CPU only (or a backend without accelerators,
    such as local). ``lost``: its chip-hours were lost (preempted, lost, or a failure
    that a next attempt redid). ``cost``: None without a price table, or when the table
    has no price for this accelerator (and spot or on-demand) while it used chips."""

    job_id: str
    attempt: int
    accelerator: str | None
    chips: int
    hosts: int
    spot: bool
    queued_seconds: float
    running_seconds: float
    chip_hours: float
    status: str
    reason: str | None
    lost: bool
    cost: float | None
    #: Epoch seconds it started running and ended (None: not yet), for charts per day.
    started_at: float | None = None
    ended_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Usage:
    """A job's (or many jobs') attempts and their totals; ``useful_chip_hours`` +
    ``lost_chip_hours`` == ``chip_hours``."""

    attempts: tuple[AttemptUsage, ...]
    chip_hours: float
    useful_chip_hours: float
    lost_chip_hours: float
    queued_seconds: float
    running_seconds: float
    cost: float | None
    currency: str | None

    @classmethod
    def of(cls, attempts: Iterable[AttemptUsage], prices: dict[str, Any] | None = None) -> Usage:
        """The totals of ``attempts``. ``cost`` is None without a price table, and when any
        attempt that used chips has no price (a partial sum would understate it)."""
        found = tuple(attempts)
        # each part summed from its attempts: ``total - lost`` rounds (0.005254...34 for
        # an attempt of 0.005254...36 chip-hours), and a part must read its attempts' figure
        lost = sum(a.chip_hours for a in found if a.lost)
        useful = sum(a.chip_hours for a in found if not a.lost)
        costs = [a.cost for a in found]
        priced = prices is not None and all(c is not None for c in costs)
        return cls(
            attempts=found,
            chip_hours=useful + lost,
            useful_chip_hours=useful,
            lost_chip_hours=lost,
            queued_seconds=sum(a.queued_seconds for a in found),
            running_seconds=sum(a.running_seconds for a in found),
            cost=sum(c for c in costs if c is not None) if priced else None,
            currency=(prices or {}).get("currency"),
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["attempts"] = [a.to_dict() for a in self.attempts]
        return data

    def describe(self) -> str:
        """One line for task logs: ``usage: 2 attempts on tpu-v5e-16 (16 chips): 3.20
        chip-hours (useful 2.40, lost 0.80), queued 41s, ran 720s, cost 1.92 USD``."""
        n = len(self.attempts)
        accelerators = sorted({a.accelerator for a in self.attempts if a.accelerator})
        chips = max((a.chips for a in self.attempts), default=0)
        where = (
            f"on {', '.join(accelerators)} ({chips} chips)" if chips else "on CPU only (0 chips)"
        )
        text = (
            f"usage: {n} attempt{'s' if n != 1 else ''} {where}: {self.chip_hours:.2f} "
            f"chip-hours (useful {self.useful_chip_hours:.2f}, lost {self.lost_chip_hours:.2f}), "
            f"queued {self.queued_seconds:.0f}s, ran {self.running_seconds:.0f}s"
        )
        if self.cost is not None:
            text += f", cost {self.cost:.2f}{' ' + self.currency if self.currency else ''}"
        return text


# ---- prices --------------------------------------------------------------------------------


def prices_for(target: dict[str, Any], prices: Any = None) -> dict[str, Any] | None:
    """The price table in force: ``prices`` (a table or a file path) if given, else the
    job's target's (as submitted: a connection's or block's table travels with the job),
    else ``KINETIC_PRICES`` here (JSON, or a file path); None: no cost."""
    if prices is not None:
        return check_prices(prices)
    if target.get("prices") is not None:
        return check_prices(target["prices"])
    raw = os.environ.get(PRICES_ENV, "")
    if not raw.strip():
        return None
    return check_prices(raw)  # JSON text, or the path of a JSON/YAML file


def _price(prices: dict[str, Any], accelerator: str | None, spot: bool) -> float | None:
    """Per chip-hour: the accelerator's exact entry, else its family's (``tpu-v5e``)."""
    if not accelerator:
        return None
    match = _FAMILY.match(accelerator)
    family = (match.group(1) or match.group(2)) if match else None
    entry = prices.get(accelerator) or (prices.get(family) if family else None)
    if not isinstance(entry, dict):
        return None
    value = entry.get("spot" if spot else "on_demand")
    return float(value) if value is not None else None


def _cost(prices: dict[str, Any] | None, facts: dict[str, Any]) -> float | None:
    if prices is None:
        return None
    if not facts["chips"]:
        return 0.0
    price = _price(prices, facts["accelerator"], facts["spot"])
    return None if price is None else price * facts["chip_hours"]


# ---- one attempt ---------------------------------------------------------------------------


def _shape(handle: Any) -> tuple[str | None, int, int]:
    """(accelerator, chips over all hosts, hosts) of ``handle``'s attempt."""
    accelerator = handle.accelerator  # None on a backend without accelerators (local)
    shape = shape_of(handle.target)
    return accelerator, (shape.chips if accelerator else 0), shape.hosts


def _running_since(storage: Storage, job_id: str) -> float | None:
    """When the attempt started running: the runner's own record, else the first
    RUNNING transition an observer recorded."""
    at = _at(read_json(storage, layout.job_file(job_id, layout.STARTED)), job_id)
    if at is not None:
        return at
    for name in storage.list_names(layout.history_dir(job_id)):
        if name.startswith(f"{JobStatus.RUNNING.value}-") and name.endswith(".json"):
            entry = read_json(storage, layout.history_entry(job_id, name[: -len(".json")]))
            if (at := _at(entry, job_id)) is not None:
                return at
    return None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _at(record: dict[str, Any] | None, job_id: str) -> float | None:
    """The ``at`` time of a record of ``job_id`` (None: no such record, or another job's)."""
    if record is None or record.get("job_id") != job_id or not _number(record.get("at")):
        return None
    return float(record["at"])


def _measure(storage: Storage, handle: Any, now: float) -> dict[str, Any]:
    """The facts of one attempt from its records (what ``usage.json`` holds)."""
    job_id = handle.job_id
    accelerator, chips, hosts = _shape(handle)
    outcome = read_outcome(storage, job_id)
    started = _running_since(storage, job_id)
    ended: float | None = None
    if outcome is not None:
        finished = _at(read_json(storage, layout.job_file(job_id, layout.FINISHED)), job_id)
        ended = finished if finished is not None else _at(outcome, job_id)
        ended = now if ended is None else ended
    created = float(handle.created_at or 0.0) or (started or ended or now)
    status = outcome["status"] if outcome else ("RUNNING" if started else "PENDING")
    start = max(started, created) if started is not None else None
    until = ended if ended is not None else now
    running = max(0.0, until - start) if start is not None else 0.0
    return {
        "job_id": job_id,
        "version": USAGE_VERSION,
        "attempt": int(handle.attempt),
        "accelerator": accelerator,
        "chips": chips,
        "hosts": hosts,
        "spot": bool(handle.spot),
        "queued_seconds": max(0.0, (start if start is not None else until) - created),
        "running_seconds": running,
        "chip_hours": chips * running / 3600.0,
        "status": status,
        "reason": outcome.get("reason") if outcome else None,
        "started_at": start,
        "ended_at": ended,
        "terminal": outcome is not None,
    }


_FIELDS = {
    "attempt": int,
    "chips": int,
    "hosts": int,
    "spot": bool,
    "queued_seconds": float,
    "running_seconds": float,
    "chip_hours": float,
    "status": str,
}


def _recorded(storage: Storage, job_id: str, key: str | None) -> dict[str, Any] | None:
    """The attempt's ``usage.json`` if it is this job's, well formed and (with a signing
    key) validly signed; None otherwise (then it is recomputed, not trusted)."""
    data = read_json(storage, layout.job_file(job_id, layout.USAGE))
    if data is None or data.get("job_id") != job_id or data.get("version") != USAGE_VERSION:
        return None
    signature = data.pop("hmac", None)
    if key and not signing.valid(key, data, signature):
        log.warning("kinetic: ignoring %s of job %s: unsigned or forged", layout.USAGE, job_id)
        return None
    for name, kind in _FIELDS.items():
        value = data.get(name)
        if not (isinstance(value, kind) or (kind is float and _number(value))):
            return None
    return data


def _record(storage: Storage, facts: dict[str, Any], key: str | None) -> dict[str, Any]:
    """Write the terminal attempt's record once; a reader that lost the race returns the
    winner's record, so every reader reports the same figures. Read-only storage: the
    facts as measured."""
    data = dict(facts)
    if key:
        data["hmac"] = signing.mac(key, facts)
    try:
        storage.write_bytes(
            layout.job_file(facts["job_id"], layout.USAGE),
            json.dumps(data).encode(),
            create_only=True,
        )
    except FileExistsError:
        return _recorded(storage, facts["job_id"], key) or facts
    except (StorageError, OSError) as exc:
        log.info("kinetic: cannot record the usage of %s: %s", facts["job_id"], exc)
    return facts


def attempt_facts(storage: Storage, handle: Any, now: float | None = None) -> dict[str, Any]:
    """The recorded facts of ``handle``'s attempt, measured (and recorded if it ended)
    when there is no valid record yet."""
    key = signing.key_in_force(getattr(handle, "signing_key", None))
    found = _recorded(storage, handle.job_id, key)
    if found is not None:
        return found
    facts = _measure(storage, handle, time.time() if now is None else now)
    return _record(storage, facts, key) if facts["terminal"] else facts


def _redone(storage: Storage, handle: Any) -> bool:
    """A next attempt of the job's key exists (a recovery, or an orchestrator retry)."""
    nxt = recovery.successor_id(handle)
    return storage.exists(layout.job_file(nxt, layout.HANDLE))


def attempt_usage(
    storage: Storage, handle: Any, prices: dict[str, Any] | None, now: float | None = None
) -> AttemptUsage:
    facts = attempt_facts(storage, handle, now)
    lost = facts["status"] == JobStatus.FAILED.value and (
        recoverable_reason(facts.get("reason")) or _redone(storage, handle)
    )
    known = {f.name for f in fields(AttemptUsage)}
    values = {k: v for k, v in facts.items() if k in known}
    return AttemptUsage(**{**values, "lost": lost, "cost": _cost(prices, facts)})


# ---- a job, many jobs ----------------------------------------------------------------------


def job_usage(attempts: list[Any], prices: Any = None, now: float | None = None) -> Usage:
    """The usage of one job from the handles of its attempts, oldest first (the first
    attempt's target decides the price table unless ``prices`` is given)."""
    if not attempts:
        return Usage.of(())
    table = prices_for(attempts[0].target, prices)
    storage = open_storage(attempts[0].storage)
    return Usage.of((attempt_usage(storage, h, table, now) for h in attempts), table)


def per_job(handles: Iterable[Any], price_table: Any = None) -> list[Usage]:
    """The usage of each distinct job among ``handles`` (a listing holds every attempt of
    a recovered job: each job is counted once, with all its attempts)."""
    table = None if price_table is None else check_prices(price_table)  # read a file once
    seen: set[str] = set()
    out: list[Usage] = []
    for handle in handles:
        if handle.job_id in seen:
            continue
        found = handle.usage(prices=table)
        seen.update(a.job_id for a in found.attempts)
        seen.add(handle.job_id)
        out.append(found)
    return out


def combine(jobs: Iterable[Usage]) -> Usage:
    """The sum of jobs already measured (``per_job``), each counted once: a cost only
    when every job has one in one currency (mixed currencies do not add up)."""
    found = list(jobs)
    currencies = {u.currency for u in found if u.currency}
    priced = bool(found) and all(u.cost is not None for u in found) and len(currencies) <= 1
    total = Usage.of((a for u in found for a in u.attempts), {} if priced else None)
    return dataclasses.replace(
        total, currency=next(iter(currencies)) if priced and currencies else None
    )


def usage_summary(handles: Iterable[Any], price_table: Any = None) -> Usage:
    """The sum over many jobs (e.g. ``kc.list_jobs(since="7d", tags={...})``), each job
    counted once with all its attempts. ``price_table`` (a table or a file path) prices
    every job; without it each job's own (its target's, else ``KINETIC_PRICES``)."""
    return combine(per_job(handles, price_table))
