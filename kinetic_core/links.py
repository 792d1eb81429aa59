"""Web pages of a job: its GKE workload, its Cloud Logging query, its stored files.

A link exists only where there is a page to open: the Cloud Console for a Kubernetes/GKE
target with a GCP ``project``, the GCS browser for ``gs://`` storage. A local job on
local storage has none. The CLI prints these; the Airflow provider turns them into
extra links, Prefect into artifact links.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from kinetic_core.jobs import JobHandle

__all__ = ["LINK_KINDS", "job_links"]

CONSOLE = "https://console.cloud.google.com"
#: Every kind of link, in display order.
LINK_KINDS = ("job", "logs", "files")


def job_links(handle: JobHandle) -> dict[str, str]:
    """``{kind: url}`` for the pages this job has (kinds from ``LINK_KINDS``)."""
    built = {"job": _workload_url(handle), "logs": _logs_url(handle), "files": _files_url(handle)}
    return {kind: url for kind, url in built.items() if url}


def gke_cluster(target: dict[str, Any]) -> tuple[str, str] | None:
    """``(location, cluster)`` from a kube context named as ``gcloud`` names them
    (``gke_PROJECT_LOCATION_CLUSTER``), else None."""
    context = target.get("kube_context") or ""
    project = target.get("project") or ""
    prefix = f"gke_{project}_"
    if not project or not context.startswith(prefix):
        return None
    location, _, cluster = context[len(prefix) :].partition("_")
    return (location, cluster) if location and cluster else None


def _cloud_target(handle: JobHandle) -> tuple[str, str, str] | None:
    """``(project, namespace, job name)`` of a Kubernetes job in a GCP project, else None."""
    name = handle.kubernetes_job_name
    project = handle.target.get("project")
    if name is None or not project:
        return None
    return project, handle.target.get("namespace") or "default", name


def _workload_url(handle: JobHandle) -> str | None:
    """The Job's details page when the cluster is known, else the project's workloads
    filtered to the job."""
    found = _cloud_target(handle)
    if found is None:
        return None
    project, namespace, name = found
    cluster = gke_cluster(handle.target)
    if cluster is not None:
        location, cluster_name = cluster
        path = f"/kubernetes/job/{location}/{cluster_name}/{namespace}/{name}/details"
        return f"{CONSOLE}{path}?{urlencode({'project': project})}"
    return f"{CONSOLE}/kubernetes/workload/overview?{urlencode({'project': project, 'q': name})}"


def _logs_url(handle: JobHandle) -> str | None:
    """A Cloud Logging query for the job's pod containers."""
    found = _cloud_target(handle)
    if found is None:
        return None
    project, namespace, name = found
    lines = ['resource.type="k8s_container"', f'resource.labels.project_id="{project}"']
    cluster = gke_cluster(handle.target)
    if cluster is not None:
        lines.append(f'resource.labels.location="{cluster[0]}"')
        lines.append(f'resource.labels.cluster_name="{cluster[1]}"')
    lines.append(f'resource.labels.namespace_name="{namespace}"')
    lines.append(f'labels."k8s-pod/job-name"="{name}"')
    query = quote("\n".join(lines), safe="")
    return f"{CONSOLE}/logs/query;query={query}?{urlencode({'project': project})}"


def _files_url(handle: JobHandle) -> str | None:
    """The job's folder in the GCS browser for ``gs://`` storage."""
    location = handle.location
    if not location.startswith("gs://"):
        return None
    return f"{CONSOLE}/storage/browser/{location[len('gs://') :]}"
