"""A batch's records in storage: manifest, staging errors, markers and the launch ledger.

Layout (see ``kinetic_core.records.layout``): ``manifest.json`` (header, written first),
``children/{i}.json`` (only for an input whose call could not be staged), create-only
``state/`` markers, and the launch ledger ``launches/{seq}.json``: one create-only ticket
per launched attempt ``(child index, attempt)``. Tickets are taken in sequence, each only
after every earlier one exists, so whoever takes ticket ``seq`` has read the whole ledger
before it: two drivers racing for one ticket leave one winner, and no attempt is ever
ticketed twice. Bookkeeping grows linearly with children; no document is rewritten.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from kinetic_core.errors import CorruptRecord, JobCancelled, JobNotFound, SubmissionError
from kinetic_core.jobs.handle import BATCH_GROUP_TAG, BATCH_INDEX_TAG, JobHandle
from kinetic_core.records import layout
from kinetic_core.states import ChildStatus
from kinetic_core.storage import Storage, open_storage
from kinetic_core.util import signing
from kinetic_core.util.ids import keyed_id


@dataclass
class ChildRecord:
    """What the ledger says of one input: its launched attempts (job ids, in order), or
    why its call could not be staged."""

    index: int
    attempts: list[str] = field(default_factory=list)
    error: dict[str, str] | None = None

    def to_json(self) -> bytes:
        return json.dumps(
            {"index": self.index, "attempts": self.attempts, "error": self.error}
        ).encode()


@dataclass(frozen=True)
class Ticket:
    """One launch: attempt ``attempt`` of input ``index``, taken at ``at``."""

    seq: int
    index: int
    attempt: int
    at: float


# Target options that say how to reach the backend (replaced by a backend overlay).
BACKEND_ACCESS = ("in_cluster", "kubeconfig", "kube_context")


def read_manifest(
    storage: Storage, group_id: str, signing_key: str | None = None
) -> dict[str, Any]:
    """The batch's header. With a signing key (argument or ``KINETIC_SIGNING_KEY``) it
    must carry a valid signature: a driver launches children from what it says (their
    import path, their folder), so an edited or forged header is refused."""
    try:
        manifest = json.loads(storage.read_bytes(layout.manifest(group_id)))
    except FileNotFoundError:
        raise JobNotFound(
            f"No batch {group_id!r} under {storage.uri}. Check the group id and that "
            "KINETIC_STORAGE (or storage=) points at the storage it was submitted to."
        ) from None
    signature = manifest.pop("hmac", None)
    key = signing_key or os.environ.get("KINETIC_SIGNING_KEY") or None
    if key and not signing.valid(key, manifest, signature):
        where = storage.location(layout.manifest(group_id))
        raise CorruptRecord(
            f"{where} is unsigned or has an invalid signature (edited, forged, or written "
            "with another KINETIC_SIGNING_KEY): the batch is not acted on.",
            job_id=group_id,
            path=where,
        )
    return manifest


def signed_manifest(manifest: dict[str, Any], signing_key: str | None) -> bytes:
    """What ``manifest.json`` holds: the header, signed when a signing key is set."""
    data = dict(manifest)
    if signing_key:
        data["hmac"] = signing.mac(signing_key, manifest)
    return json.dumps(data).encode()


def child_key(group_id: str, index: int) -> str:
    """The idempotency key of a child; its attempts' job ids derive from it."""
    return f"batch/{group_id}/{index}"


def child_job_id(group_id: str, index: int, attempt: int) -> str:
    """The deterministic job id of one attempt of a child: racing launchers agree on it."""
    return keyed_id(child_key(group_id, index), attempt)


class BatchRecords:
    """The records of one batch, cached in memory and kept in step with storage.

    Tickets and staging errors never change once written, so each is read once.
    """

    def __init__(self, manifest: dict[str, Any], signing_key: str | None) -> None:
        self.manifest = manifest
        self.group_id: str = manifest["group_id"]
        self.total: int = manifest["total_expected"]
        self.signing_key = signing_key or os.environ.get("KINETIC_SIGNING_KEY") or None
        self.storage = open_storage(manifest["storage"])
        self.tickets: list[Ticket] = []
        self.children: dict[int, ChildRecord] = {}
        self.stage_errors: dict[int, dict[str, str]] = {}
        self.errors: dict[int, BaseException] = {}  # live staging exceptions of this process
        self.handles: dict[str, JobHandle] = {}
        #: Target options this process uses to reach the backend, over the manifest's (a
        #: driver in a pod uses the pod's credentials); never written into a handle.json.
        self.backend_overlay: dict[str, Any] = {}
        self._errors_read = False
        self._lock = threading.Lock()

    # ---- markers ------------------------------------------------------------------------
    def marker(self, name: str) -> bool:
        return self.storage.exists(layout.batch_state(self.group_id, name))

    def set_marker(self, name: str, data: dict[str, Any] | None = None) -> None:
        try:
            self.storage.write_bytes(
                layout.batch_state(self.group_id, name),
                json.dumps(data or {}).encode(),
                create_only=True,
            )
        except FileExistsError:
            pass

    def rounds(self) -> int:
        """How many keyed resubmissions reopened the batch after it ended with failures."""
        names = self.storage.list_names(layout.batch_states(self.group_id))
        return sum(1 for n in names if n.startswith(layout.ROUND_PREFIX))

    def open_round(self, number: int) -> None:
        self.set_marker(f"{layout.ROUND_PREFIX}{number}")

    def clear_error(self, index: int) -> None:
        """A resubmission staged the call that could not be staged before."""
        self.errors.pop(index, None)
        self.stage_errors.pop(index, None)
        self.storage.delete(layout.child(self.group_id, index))

    # ---- staging errors -----------------------------------------------------------------
    def save_error(self, index: int, exc: BaseException) -> None:
        self.errors[index] = exc
        error = {"type": type(exc).__name__, "message": str(exc)[:2000]}
        self.stage_errors[index] = error
        self.storage.write_bytes(
            layout.child(self.group_id, index), ChildRecord(index, [], error).to_json()
        )

    def _read_errors(self) -> None:
        if self._errors_read:
            return
        for name in self.storage.list_names(layout.children(self.group_id)):
            index = int(name.split(".")[0])
            if index in self.stage_errors:
                continue
            try:
                data = json.loads(self.storage.read_bytes(layout.child(self.group_id, index)))
            except (FileNotFoundError, ValueError):
                continue
            if data.get("error"):
                self.stage_errors[index] = data["error"]
        # Staging is over once the batch is registered: no error can appear after that.
        self._errors_read = self.marker(layout.SUBMISSION_COMPLETE)

    # ---- the launch ledger --------------------------------------------------------------
    def read_ledger(self) -> list[Ticket]:
        """Every ticket taken so far, in sequence (new ones are read, old ones cached)."""
        names = self.storage.list_names(layout.launches(self.group_id))
        taken = {int(n.split(".")[0]) for n in names if n.split(".")[0].isdigit()}
        seq = len(self.tickets)
        while seq in taken:
            try:
                data = json.loads(self.storage.read_bytes(layout.launch_ticket(self.group_id, seq)))
            except (FileNotFoundError, ValueError):
                break  # being written right now: read it next time
            self._add(Ticket(seq, data["index"], data["attempt"], data["at"]))
            seq += 1
        return list(self.tickets)

    def take_ticket(self, index: int, attempt: int) -> Ticket | None:
        """Take the next ticket for ``(index, attempt)``; None if another driver took that
        sequence number first (read the ledger again, then decide again)."""
        ticket = Ticket(len(self.tickets), index, attempt, time.time())
        data = {
            "index": index,
            "attempt": attempt,
            "at": ticket.at,
            "by": f"{socket.gethostname()}:{os.getpid()}",
        }
        try:
            self.storage.write_bytes(
                layout.launch_ticket(self.group_id, ticket.seq),
                json.dumps(data).encode(),
                create_only=True,
            )
        except FileExistsError:
            return None
        self._add(ticket)
        return ticket

    def _add(self, ticket: Ticket) -> None:
        with self._lock:
            self.tickets.append(ticket)
            rec = self.children.setdefault(ticket.index, ChildRecord(ticket.index))
            rec.attempts.append(child_job_id(self.group_id, ticket.index, ticket.attempt))

    def latest_tickets(self) -> dict[int, Ticket]:
        latest: dict[int, Ticket] = {}
        for t in self.tickets:
            latest[t.index] = t
        return latest

    # ---- handles ------------------------------------------------------------------------
    def handle_for(self, ticket: Ticket) -> JobHandle:
        """The job of a ticket, as this process reaches it (``backend_overlay``)."""
        job_id = child_job_id(self.group_id, ticket.index, ticket.attempt)
        if job_id not in self.handles:
            public = self.public_handle(ticket)
            if self.backend_overlay:
                kept = {k: v for k, v in public.target.items() if k not in BACKEND_ACCESS}
                public = replace(public, target={**kept, **self.backend_overlay})
            self.handles[job_id] = public
        return self.handles[job_id]

    def public_handle(self, ticket: Ticket) -> JobHandle:
        """The job of a ticket as its ``handle.json`` records it: its clock starts when it
        was ticketed (a queued child is not late for ``schedule_timeout``)."""
        m = self.manifest
        return JobHandle(
            job_id=child_job_id(self.group_id, ticket.index, ticket.attempt),
            storage=m["storage"],
            target=m["target"],
            name=m["name"],
            created_at=ticket.at,
            attempt=ticket.attempt,
            idempotency_key=child_key(self.group_id, ticket.index),
            tags={
                **m["tags"],
                BATCH_GROUP_TAG: self.group_id,
                BATCH_INDEX_TAG: str(ticket.index),
            },
            owner=m.get("owner", ""),
            signing_key=self.signing_key,
        )

    def handle(self, job_id: str) -> JobHandle:
        """The handle of a launched attempt, by job id."""
        if job_id not in self.handles:
            for t in self.tickets:
                if child_job_id(self.group_id, t.index, t.attempt) == job_id:
                    return self.handle_for(t)
            raise JobNotFound(f"Job {job_id} is not an attempt of batch {self.group_id}.")
        return self.handles[job_id]

    def snapshot(self) -> dict[int, ChildRecord]:
        with self._lock:
            return {i: replace(r, attempts=list(r.attempts)) for i, r in self.children.items()}

    def reload(self, index: int) -> ChildRecord | None:
        """The child's record after reading new tickets."""
        self.read_ledger()
        return self.snapshot().get(index)

    def refresh(self) -> None:
        self.read_ledger()

    def latest_jobs(self) -> list[JobHandle | None]:
        """Latest launched attempt of each child; None where not launched (yet)."""
        self.read_ledger()
        latest = self.latest_tickets()
        return [
            self.handle_for(t) if (t := latest.get(i)) is not None else None
            for i in range(self.total)
        ]

    def submission_failures(self) -> dict[int, BaseException]:
        """Inputs that have no job and never will: their call could not be staged, or the
        batch was cancelled before they were launched."""
        self._read_errors()
        failures: dict[int, BaseException] = {
            i: self.errors.get(i) or SubmissionError(f"{e['type']}: {e['message']}")
            for i, e in self.stage_errors.items()
        }
        if self.marker(layout.CANCEL_REQUESTED):
            launched = self.latest_tickets()
            why = (
                "fail_fast stopped the batch"
                if self.marker(layout.FAILED_FAST)
                else "the batch was cancelled"
            )
            for i in range(self.total):
                if i not in launched and i not in failures:
                    failures[i] = JobCancelled(f"Child {i} was not submitted: {why}.")
        return dict(sorted(failures.items()))


def unsubmitted_status(error: BaseException) -> ChildStatus:
    """The status of an input that has no job: CANCELLED when the batch was cancelled
    before it was launched, else SUBMIT_FAILED."""
    return ChildStatus.CANCELLED if isinstance(error, JobCancelled) else ChildStatus.SUBMIT_FAILED
