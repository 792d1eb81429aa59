"""What storage says about one job, gathered for status resolution (``control/resolution.py``):
the records the runner and the clients wrote (``records/lifecycle.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kinetic_core.records import layout
from kinetic_core.records.lifecycle import read_json
from kinetic_core.storage import Storage


@dataclass
class Evidence:
    """What the runner and the clients wrote to storage about one job."""

    started: dict[str, Any] | None = None
    finished: dict[str, Any] | None = None
    stop: dict[str, Any] | None = None  # stop.json of older versions
    collected: dict[str, Any] | None = None
    launched: dict[str, Any] | None = None  # the submitter saw backend.launch() return


def read_evidence(storage: Storage, job_id: str) -> Evidence:
    ev = Evidence(
        started=read_json(storage, layout.job_file(job_id, layout.STARTED)),
        finished=read_json(storage, layout.job_file(job_id, layout.FINISHED)),
        stop=read_json(storage, layout.job_file(job_id, layout.STOP)),
        collected=read_json(storage, layout.job_file(job_id, layout.COLLECTED)),
        launched=read_json(storage, layout.job_file(job_id, layout.LAUNCHED)),
    )
    result = layout.job_file(job_id, layout.RESULT)
    if ev.finished is None and storage.exists(result):
        # The runner stored a result but died before recording "finished".
        from kinetic_core.records.envelope import read_summary

        try:
            header = read_summary(storage, result)
            if header.get("job_id") != job_id:
                return ev  # copied from another job: no evidence about this one
            ev.finished = {"success": bool(header.get("success")), "phase": None}
        except Exception:
            pass
    return ev
