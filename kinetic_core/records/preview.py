"""``jobs/{id}/preview.json``: what a viewer reads of a job's result, never the pickle.

A result envelope is a pickle the job wrote: loading it runs code of the job's choosing, so
nothing that only shows a job loads it (``result()`` does, in the caller's process). The
runner writes this record beside it, create-only: a bounded repr of the value, made in the
job within ``SECONDS`` (``util/bounded.py``), or the failure as data (the exception's type
name, message and traceback text, as ``failure_body`` already holds them). ``shown`` reads
it, or says in words why there is none (an older version wrote the job; collected and
cleaned up).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from kinetic_core.records import layout
from kinetic_core.records.envelope import read_summary
from kinetic_core.storage import Storage
from kinetic_core.util.bounded import bounded_repr, cut

__all__ = ["SECONDS", "Preview", "of_body", "read", "shown", "write"]

#: How long the runner waits for a value's repr (the value's own code).
SECONDS = 2.0
VALUE_LIMIT = 2000
MESSAGE_LIMIT = 4000
#: A traceback keeps its end (where it was raised) when it is longer.
TRACEBACK_LIMIT = 20000
#: What a viewer says of a job written before previews existed.
OLDER = (
    "no preview (written by an older version of kinetic-workflows); the value is loaded only "
    "by result() or `kinetic jobs result`, in your own process"
)
COLLECTED = "collected and cleaned up"


@dataclass(frozen=True)
class Preview:
    """A job's outcome as a viewer shows it: plain data, never code.

    ``success``: the value (``text`` its bounded repr, ``type_name`` its class) or a failure
    (``type_name`` the exception's, ``text`` its message, ``traceback`` its text, ``phase``
    and ``worker`` where it was raised). ``available`` is False where there is nothing to
    show but ``note``; ``note`` also says what was cut."""

    success: bool
    type_name: str = ""
    text: str = ""
    traceback: str = ""
    phase: str = "run"
    worker: int | None = None
    note: str = ""
    available: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Preview:
        """A stored preview, each field checked for its type (a record is data from the
        job: a wrong type is dropped, never trusted)."""

        def text(name: str) -> str:
            value = data.get(name)
            return value if isinstance(value, str) else ""

        worker = data.get("worker")
        return cls(
            success=data.get("success") is True,
            type_name=text("type_name"),
            text=text("text"),
            traceback=text("traceback"),
            phase=text("phase") or "run",
            worker=worker if isinstance(worker, int) and not isinstance(worker, bool) else None,
            note=text("note"),
            available=data.get("available") is not False,
        )


def _type_name(value: Any) -> str:
    kind = type(value)
    return f"{getattr(kind, '__module__', '?')}.{getattr(kind, '__qualname__', kind.__name__)}"


def of_body(body: dict[str, Any], seconds: float = SECONDS) -> Preview:
    """The preview of a result body (``success_body`` or ``failure_body``), made in the job."""
    if body.get("success"):
        value = body.get("value")
        shown = bounded_repr(value, limit=VALUE_LIMIT, seconds=seconds)
        return Preview(
            success=True,
            type_name=_type_name(value),
            text=shown.text,
            note=shown.note,
            available=not (shown.note and not shown.text),
        )
    message, cut_message = cut(str(body.get("exc_message") or ""), MESSAGE_LIMIT)
    trace = str(body.get("traceback") or "")
    kept = trace[-TRACEBACK_LIMIT:]
    notes = [n for n in (cut_message and f"message {cut_message}",) if n]
    if len(kept) < len(trace):
        notes.append(f"traceback: its last {TRACEBACK_LIMIT} of {len(trace)} characters")
    worker = body.get("worker")
    return Preview(
        success=False,
        type_name=str(body.get("exc_type") or ""),
        text=message,
        traceback=kept,
        phase=str(body.get("phase") or "run"),
        worker=worker if isinstance(worker, int) else None,
        note="; ".join(notes),
    )


def write(storage: Storage, job_id: str, preview: Preview) -> bool:
    """Store ``preview`` create-only beside the result; False if one was there already."""
    raw = json.dumps(preview.to_dict()).encode()
    try:
        storage.write_bytes(layout.job_file(job_id, layout.PREVIEW), raw, create_only=True)
    except FileExistsError:
        return False
    return True


def read(storage: Storage, job_id: str) -> Preview | None:
    """The stored preview of attempt ``job_id``, or None (none, or unreadable)."""
    try:
        data = json.loads(storage.read_bytes(layout.job_file(job_id, layout.PREVIEW)))
    except (FileNotFoundError, ValueError):
        return None
    return Preview.from_dict(data) if isinstance(data, dict) else None


def shown(storage: Storage, job_id: str) -> Preview | None:
    """What a viewer shows of attempt ``job_id``'s outcome: its preview; else, where its
    result is stored, a note that an older version wrote it (success read from the
    envelope's header: no unpickling); else, once collected, a note saying so; else None
    (no outcome stored: running, cancelled, lost)."""
    found = read(storage, job_id)
    if found is not None:
        return found
    key = layout.job_file(job_id, layout.RESULT)
    try:
        header = read_summary(storage, key)
    except FileNotFoundError:
        if storage.exists(layout.job_file(job_id, layout.COLLECTED)):
            return Preview(success=True, note=COLLECTED, available=False)
        return None
    except Exception:  # a torn or foreign envelope: nothing to show, never an error
        return Preview(success=False, note="its result envelope is unreadable", available=False)
    return Preview(success=header.get("success") is not False, note=OLDER, available=False)
