"""Hook objects for the hook tests; kept import-light (observer processes import it)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any


class FileHooks:
    """Writes one file per call into ``folder`` (``{event}--{job_id}--{unique}``), so calls
    made by many processes can be counted afterwards."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)

    def _note(self, event: str, job_id: str, extra: str = "") -> None:
        (self.folder / f"{event}--{job_id}--{os.getpid()}-{uuid.uuid4().hex}").write_text(extra)

    def on_job_submitted(self, job: Any) -> None:
        self._note("submitted", job.job_id)

    def on_job_started(self, job: Any) -> None:
        self._note("started", job.job_id)

    def on_job_succeeded(self, job: Any) -> None:
        self._note("succeeded", job.job_id)

    def on_job_failed(self, job: Any) -> None:
        self._note("failed", job.job_id)

    def on_job_cancelled(self, job: Any) -> None:
        self._note("cancelled", job.job_id)

    def on_job_recovered(self, job: Any, successor: Any) -> None:
        self._note("recovered", job.job_id, successor.job_id)


def calls(folder: str | os.PathLike[str]) -> list[tuple[str, str]]:
    """(event, job id) of every call ``FileHooks(folder)`` recorded, sorted."""
    return sorted(tuple(p.name.split("--")[:2]) for p in Path(folder).iterdir())  # type: ignore[misc]
