"""The batch submitter: a background thread of the submitting process that launches the
children under ``max_concurrency``, records each child, then marks submission complete.

Children are submitted with idempotency keys ``batch/{group_id}/{i}``, so a retried
``submit_map`` with the same key resumes where an earlier submitter stopped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kinetic_core import layout
from kinetic_core.batch.records import BatchRecords, ChildRecord, child_key
from kinetic_core.config import Target
from kinetic_core.jobs import JobHandle
from kinetic_core.polling import poll_ticks
from kinetic_core.states import JobStatus
from kinetic_core.status import resolve_states
from kinetic_core.submission import submit


@dataclass(frozen=True)
class Plan:
    """What the submitting process needs to launch the children."""

    fn: Callable[..., Any]
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]]
    target: Target
    name: str
    tags: dict[str, str]
    max_concurrency: int


def start_submitter(records: BatchRecords, plan: Plan) -> None:
    """Submit the children of ``plan`` in a background thread of this process."""
    records.refresh()  # a resubmission knows what the first submitter recorded
    records.submitter = threading.Thread(
        target=_submit_all,
        args=(records, plan),
        name=f"kinetic-batch-{records.group_id}",
        daemon=True,
    )
    records.submitter.start()


def _cancelled(records: BatchRecords) -> bool:
    if records.marker(layout.CANCEL_REQUESTED):
        records.set_marker(layout.SUBMISSION_COMPLETE)
        return True
    return False


def _submit_all(records: BatchRecords, plan: Plan) -> None:
    inflight: list[JobHandle] = []
    last_check = 0.0
    children = records.snapshot()
    recorded = [i for i, r in children.items() if r.attempts]
    latest = (
        resolve_states([records.handle(children[i].attempts[-1]) for i in recorded])
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
            records.beat()
            if _cancelled(records):
                return
        rec = children.get(index)
        if rec is not None and rec.attempts and index not in redo:
            continue  # submitted by an earlier submitter (idempotent resubmission)
        inflight = _wait_for_slot(records, inflight, plan.max_concurrency)
        if _cancelled(records):
            return
        try:
            job = submit(
                plan.fn,
                args,
                kwargs,
                target=plan.target,
                name=plan.name,
                idempotency_key=child_key(records.group_id, index),
                reuse_succeeded=True,
                tags={
                    **plan.tags,
                    "kinetic/group-id": records.group_id,
                    "kinetic/index": str(index),
                },
            )
        except Exception as exc:
            records.errors[index] = exc
            records.save(
                ChildRecord(index, [], {"type": type(exc).__name__, "message": str(exc)[:2000]})
            )
            continue
        records.record_attempt(index, job)
        inflight.append(job)
    records.set_marker(layout.SUBMISSION_COMPLETE)


def _wait_for_slot(records: BatchRecords, inflight: list[JobHandle], limit: int) -> list[JobHandle]:
    if len(inflight) < limit:
        return inflight
    for _ in poll_ticks(interval=0.5, timeout=None, describe=lambda: "waiting for a free slot"):
        inflight = [
            j for j, s in zip(inflight, resolve_states(inflight), strict=True) if not s.terminal
        ]
        if len(inflight) < limit or records.marker(layout.CANCEL_REQUESTED):
            break
        records.beat()
    return inflight
