"""A batch's records in storage: manifest, one record per child, markers, heartbeat.

Layout (see ``kinetic_core.layout``): ``manifest.json`` (header, written first),
``children/{i}.json`` (job id per attempt, or the submission error), create-only
``state/`` markers and the submitter's ``state/submitter.json`` heartbeat. Bookkeeping
grows linearly with children; no growing document is ever rewritten.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kinetic_core import layout
from kinetic_core.config import Target
from kinetic_core.errors import JobCancelled, JobNotFound, SubmissionError
from kinetic_core.jobs import JobHandle, load_handle
from kinetic_core.payload import load_envelope
from kinetic_core.procs import process_alive, start_ticks
from kinetic_core.states import ChildStatus
from kinetic_core.storage import Storage, open_storage
from kinetic_core.submission import submit

STALE_AFTER = 60.0  # a submitter silent this long is presumed dead


@dataclass
class ChildRecord:
    index: int
    attempts: list[str] = field(default_factory=list)
    error: dict[str, str] | None = None

    def to_json(self) -> bytes:
        return json.dumps(
            {"index": self.index, "attempts": self.attempts, "error": self.error}
        ).encode()


def read_manifest(storage: Storage, group_id: str) -> dict[str, Any]:
    try:
        return json.loads(storage.read_bytes(layout.manifest(group_id)))
    except FileNotFoundError:
        raise JobNotFound(
            f"No batch {group_id!r} under {storage.uri}. Check the group id and that "
            "KINETIC_STORAGE (or storage=) points at the storage it was submitted to."
        ) from None


def child_key(group_id: str, index: int) -> str:
    """The idempotency key of a child: concurrent retries of it create one attempt."""
    return f"batch/{group_id}/{index}"


class BatchRecords:
    """The child records of one batch, cached in memory and kept in step with storage.

    Thread-safe: the submitting process's background submitter adds records while
    waiters read them. ``submitting`` is True in that process while it submits (then
    memory is the truth and storage is not re-read).
    """

    def __init__(self, manifest: dict[str, Any], signing_key: str | None) -> None:
        self.manifest = manifest
        self.group_id: str = manifest["group_id"]
        self.total: int = manifest["total_expected"]
        self.signing_key = signing_key
        self.storage = open_storage(manifest["storage"])
        self.children: dict[int, ChildRecord] = {}
        self.handles: dict[str, JobHandle] = {}
        self.errors: dict[int, BaseException] = {}  # live exceptions of this process's submitter
        self.submitter: threading.Thread | None = None
        self._lock = threading.Lock()

    # ---- markers and heartbeat ---------------------------------------------------------
    def marker(self, name: str) -> bool:
        return self.storage.exists(layout.batch_state(self.group_id, name))

    def set_marker(self, name: str) -> None:
        try:
            self.storage.write_bytes(
                layout.batch_state(self.group_id, name), b"{}", create_only=True
            )
        except FileExistsError:
            pass

    def beat(self) -> None:
        pid = os.getpid()
        beat = {"at": time.time(), "host": socket.gethostname(), "pid": pid}
        beat["start_ticks"] = start_ticks(pid)
        self.storage.write_bytes(
            layout.batch_state(self.group_id, layout.SUBMITTER), json.dumps(beat).encode()
        )

    @property
    def submission_abandoned(self) -> bool:
        """The submitter stopped (killed, crashed) before submitting every child."""
        if self.submitter is not None and self.submitter.is_alive():
            return False
        if self.marker(layout.SUBMISSION_COMPLETE):
            return False
        try:
            beat = json.loads(
                self.storage.read_bytes(layout.batch_state(self.group_id, layout.SUBMITTER))
            )
        except (FileNotFoundError, ValueError):
            beat = {"at": self.manifest["created_at"]}
        return time.time() - beat["at"] > STALE_AFTER or not _submitter_alive(beat)

    # ---- child records -----------------------------------------------------------------
    def save(self, record: ChildRecord) -> None:
        with self._lock:
            self.children[record.index] = record
        self.storage.write_bytes(layout.child(self.group_id, record.index), record.to_json())

    def refresh(self) -> None:
        """Read child records we do not have yet (or whose latest attempt may have moved)."""
        if self.submitter is not None:
            return  # this process is the submitter: memory is the truth
        for name in self.storage.list_names(layout.children(self.group_id)):
            index = int(name.split(".")[0])
            if index in self.children and self.children[index].error is None:
                continue
            self.reload(index)

    def reload(self, index: int) -> ChildRecord | None:
        """Re-read one child record from storage (what we had if it cannot be read)."""
        try:
            data = json.loads(self.storage.read_bytes(layout.child(self.group_id, index)))
        except (FileNotFoundError, ValueError):
            return self.children.get(index)
        rec = ChildRecord(data["index"], data["attempts"], data.get("error"))
        with self._lock:
            self.children[index] = rec
        return rec

    def snapshot(self) -> dict[int, ChildRecord]:
        """A copy of the records: the submitter thread adds to them concurrently."""
        with self._lock:
            return dict(self.children)

    def handle(self, job_id: str) -> JobHandle:
        if job_id not in self.handles:
            self.handles[job_id] = load_handle(self.storage, job_id, self.signing_key)
        return self.handles[job_id]

    def latest_jobs(self) -> list[JobHandle | None]:
        """Latest attempt of each child; None where not (yet) submitted or submission failed."""
        self.refresh()
        records = self.snapshot()
        return [
            self.handle(rec.attempts[-1]) if (rec := records.get(i)) and rec.attempts else None
            for i in range(self.total)
        ]

    def submission_failures(self) -> dict[int, BaseException]:
        self.refresh()
        failures: dict[int, BaseException] = {}
        records = self.snapshot()
        for i, rec in records.items():
            if rec.error and not rec.attempts:
                failures[i] = self.errors.get(i) or SubmissionError(
                    f"{rec.error['type']}: {rec.error['message']}"
                )
        cancelled = self.marker(layout.CANCEL_REQUESTED)
        if cancelled and self.marker(layout.SUBMISSION_COMPLETE):
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

    def record_attempt(self, index: int, job: JobHandle) -> None:
        """Remember ``job`` as the latest attempt of child ``index``."""
        self.handles[job.job_id] = job
        rec = self.children.get(index)
        previous = rec.attempts if rec is not None else []
        if job.job_id not in previous:
            self.save(ChildRecord(index, [*previous, job.job_id]))

    def retry(self, index: int, failed: JobHandle) -> JobHandle:
        """Resubmit a failed child as its next attempt, from its verified stored call."""
        _, call = load_envelope(
            self.storage,
            layout.job_file(failed.job_id, layout.PAYLOAD),
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
            idempotency_key=child_key(self.group_id, index),
        )
        self.record_attempt(index, job)
        return job


def unsubmitted_status(error: BaseException) -> ChildStatus:
    """The status of an input that has no job: CANCELLED when the batch was cancelled
    before it was launched, else SUBMIT_FAILED."""
    return ChildStatus.CANCELLED if isinstance(error, JobCancelled) else ChildStatus.SUBMIT_FAILED


def _submitter_alive(beat: dict[str, Any]) -> bool:
    if beat.get("host") != socket.gethostname() or "pid" not in beat:
        return True  # cannot tell from here: rely on the heartbeat age
    return process_alive(beat["pid"], beat.get("start_ticks"))
