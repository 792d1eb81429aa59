"""A Kubernetes job's pages in the Google Cloud Console: its GKE workload, its Cloud Logging query.

A page exists only for a target with a GCP ``project``; the kube context named as
``gcloud`` names it (``gke_PROJECT_LOCATION_CLUSTER``) narrows it to the cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

CONSOLE = "https://console.cloud.google.com"


def console_links(job_name: str, target: Mapping[str, Any]) -> dict[str, str]:
    """``{"job": workload page, "logs": Cloud Logging query}`` of the Job ``job_name``;
    empty without a ``project``."""
    project = target.get("project")
    if not project:
        return {}
    namespace = target.get("namespace") or "default"
    cluster = gke_cluster(target)
    return {
        "job": _workload_url(project, namespace, job_name, cluster),
        "logs": _logs_url(project, namespace, job_name, cluster),
    }


def gke_cluster(target: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(location, cluster)`` from a kube context named as ``gcloud`` names them
    (``gke_PROJECT_LOCATION_CLUSTER``), else None."""
    context = target.get("kube_context") or ""
    project = target.get("project") or ""
    prefix = f"gke_{project}_"
    if not project or not context.startswith(prefix):
        return None
    location, _, cluster = context[len(prefix) :].partition("_")
    return (location, cluster) if location and cluster else None


def _workload_url(project: str, namespace: str, name: str, cluster: tuple[str, str] | None) -> str:
    """The Job's details page when the cluster is known, else the project's workloads
    filtered to the job."""
    if cluster is not None:
        location, cluster_name = cluster
        path = f"/kubernetes/job/{location}/{cluster_name}/{namespace}/{name}/details"
        return f"{CONSOLE}{path}?{urlencode({'project': project})}"
    return f"{CONSOLE}/kubernetes/workload/overview?{urlencode({'project': project, 'q': name})}"


def _logs_url(project: str, namespace: str, name: str, cluster: tuple[str, str] | None) -> str:
    """A Cloud Logging query for the job's pod containers."""
    lines = ['resource.type="k8s_container"', f'resource.labels.project_id="{project}"']
    if cluster is not None:
        lines.append(f'resource.labels.location="{cluster[0]}"')
        lines.append(f'resource.labels.cluster_name="{cluster[1]}"')
    lines.append(f'resource.labels.namespace_name="{namespace}"')
    lines.append(f'labels."k8s-pod/job-name"="{name}"')
    query = quote("\n".join(lines), safe="")
    return f"{CONSOLE}/logs/query;query={query}?{urlencode({'project': project})}"
