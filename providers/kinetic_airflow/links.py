"""Extra links a user can open: the job's GKE workload, its Cloud Logging query, its GCS files.

Airflow's UI shows only http(s) links, so a link exists only where there is a web page:
the Cloud Console for a Kubernetes/GKE target with a GCP ``project``, the GCS browser for
``gs://`` storage. The local backend gets no link (the task shows none, not an empty one).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from airflow.sdk import BaseOperatorLink

import kinetic_core as kc

CONSOLE = "https://console.cloud.google.com"
XCOM_JOB_URL = "kinetic_job_url"
XCOM_LOGS_URL = "kinetic_logs_url"
XCOM_FILES_URL = "kinetic_files_url"


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


def _cloud_target(handle: kc.JobHandle) -> tuple[str, str, str] | None:
    """``(project, namespace, job name)`` of a Kubernetes job in a GCP project, else None."""
    name = handle.kubernetes_job_name
    project = handle.target.get("project")
    if name is None or not project:
        return None
    return project, handle.target.get("namespace") or "default", name


def workload_url(handle: kc.JobHandle) -> str | None:
    """The job's Cloud Console page: its Job details when the cluster is known, else the
    project's workloads filtered to the job."""
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


def logs_url(handle: kc.JobHandle) -> str | None:
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


def files_url(handle: kc.JobHandle) -> str | None:
    """The job's folder in the GCS browser for ``gs://`` storage."""
    location = handle.location
    if not location.startswith("gs://"):
        return None
    return f"{CONSOLE}/storage/browser/{location[len('gs://') :]}"


#: XCom key -> how its URL is built; the operator pushes the ones that exist at submit.
URLS = {XCOM_JOB_URL: workload_url, XCOM_LOGS_URL: logs_url, XCOM_FILES_URL: files_url}


def job_urls(handle: kc.JobHandle) -> dict[str, str]:
    """The links this job has, by XCom key (none for the local backend on local storage)."""
    return {key: url for key, build in URLS.items() if (url := build(handle))}


def link_xcoms(handle: kc.JobHandle | None) -> dict[str, str]:
    """Every link's XCom value, ``""`` where there is no page. Pushed by each task so that
    Airflow, which resolves every extra link when a task ends, finds a value for each
    (an XCom it cannot find is logged as an error in the task log)."""
    urls = job_urls(handle) if handle is not None else {}
    return {key: urls.get(key, "") for key in URLS}


class _XComLink(BaseOperatorLink):
    """A link whose URL the task pushed to XCom ``xcom_key``; no URL, no link."""

    key = ""

    @property
    def xcom_key(self) -> str:
        return self.key

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        from airflow.sdk.execution_time.xcom import XCom

        return XCom.get_value(ti_key=ti_key, key=self.key) or ""


class KineticJobLink(_XComLink):
    """The job's workload in the Cloud Console (Kubernetes/GKE targets with a project)."""

    name = "Kinetic job"
    key = XCOM_JOB_URL


class KineticJobLogsLink(_XComLink):
    """A Cloud Logging query for the job's pod (Kubernetes/GKE targets with a project)."""

    name = "Kinetic job logs"
    key = XCOM_LOGS_URL


class KineticJobFilesLink(_XComLink):
    """The job's folder in the GCS browser (``gs://`` storage)."""

    name = "Kinetic job files"
    key = XCOM_FILES_URL


LINKS = (KineticJobLink(), KineticJobLogsLink(), KineticJobFilesLink())
