"""Web pages of a job: its pages in the backend's consoles, its stored files.

A link exists only where there is a page to open: the backend's kind says which consoles
show the job (the Cloud Console for a Kubernetes/GKE target with a GCP ``project``), the
GCS browser shows ``gs://`` storage, and a job no console shows (a local job, a cluster
outside GCP) has the dashboard's page (``kinetic ui``) when ``KINETIC_UI_URL`` says where it
is served; otherwise a local job on local storage has none. The CLI prints these; the Airflow provider turns them into extra links, Prefect
into artifact links.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING
from urllib.parse import quote

from kinetic_core.errors import ConfigError
from kinetic_core.jobs.handle import JobHandle
from kinetic_core.util import registry

if TYPE_CHECKING:
    from kinetic_core.backends import BackendKind

__all__ = ["LINK_KINDS", "job_links"]

CONSOLE = "https://console.cloud.google.com"
#: Every kind of link, in display order.
LINK_KINDS = ("job", "logs", "files")
#: Where the dashboard is served (``kinetic ui``), e.g. ``http://127.0.0.1:8265``.
UI_URL_ENV = "KINETIC_UI_URL"


def job_links(handle: JobHandle) -> dict[str, str]:
    """``{kind: url}`` for the pages this job has (kinds from ``LINK_KINDS``)."""
    kind: BackendKind = registry.backend_kind(handle.target.get("backend"))
    built = {**kind.links(handle.job_id, handle.target), "files": _files_url(handle) or ""}
    if not built.get("job"):  # no console page (a local job, a cluster outside GCP)
        built["job"] = _dashboard_url(handle.job_id) or ""
    return {name: built[name] for name in LINK_KINDS if built.get(name)}


def _files_url(handle: JobHandle) -> str | None:
    """The job's folder in the GCS browser for ``gs://`` storage."""
    location = handle.location
    if not location.startswith("gs://"):
        return None
    return f"{CONSOLE}/storage/browser/{location[len('gs://') :]}"


def _dashboard_url(job_id: str) -> str | None:
    """The job's page in the dashboard at ``KINETIC_UI_URL`` (None where it is unset);
    ConfigError for a value that is not an http(s) URL."""
    base = os.environ.get(UI_URL_ENV, "").strip()
    if not base:
        return None
    if not base.startswith(("http://", "https://")) or len(base) <= len("https://"):
        raise ConfigError(
            f"{UI_URL_ENV}={base!r} is not an http(s) URL: set it to where `kinetic ui` serves "
            "the dashboard, e.g. http://127.0.0.1:8265 (or unset it)."
        )
    return f"{base.rstrip('/')}/jobs/{quote(job_id)}"
