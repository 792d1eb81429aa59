"""Web pages of a job: its pages in the backend's consoles, its stored files.

A link exists only where there is a page to open: the backend's kind says which consoles
show the job (the Cloud Console for a Kubernetes/GKE target with a GCP ``project``), the
GCS browser shows ``gs://`` storage. A local job on local storage has none. The CLI prints
these; the Airflow provider turns them into extra links, Prefect into artifact links.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kinetic_core import registry
from kinetic_core.jobs import JobHandle

if TYPE_CHECKING:
    from kinetic_core.backends import BackendKind

__all__ = ["LINK_KINDS", "job_links"]

CONSOLE = "https://console.cloud.google.com"
#: Every kind of link, in display order.
LINK_KINDS = ("job", "logs", "files")


def job_links(handle: JobHandle) -> dict[str, str]:
    """``{kind: url}`` for the pages this job has (kinds from ``LINK_KINDS``)."""
    kind: BackendKind = registry.backend_kind(handle.target.get("backend"))
    built = {**kind.links(handle.job_id, handle.target), "files": _files_url(handle) or ""}
    return {name: built[name] for name in LINK_KINDS if built.get(name)}


def _files_url(handle: JobHandle) -> str | None:
    """The job's folder in the GCS browser for ``gs://`` storage."""
    location = handle.location
    if not location.startswith("gs://"):
        return None
    return f"{CONSOLE}/storage/browser/{location[len('gs://') :]}"
