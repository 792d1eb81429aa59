"""Job links: Cloud Console pages for Kubernetes/GKE jobs in a project, none for local jobs."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import kinetic_core as kc

CONTEXT = "gke_my-proj_us-central1_train-cluster"


def handle(storage: str = "file:///tmp/kinetic", **target: Any) -> kc.JobHandle:
    return kc.JobHandle.from_dict({"job_id": "k0123abcd-2", "storage": storage, "target": target})


def test_gke_job_with_known_cluster_links_its_job_page_and_pod_logs() -> None:
    job = handle(backend="gke", project="my-proj", namespace="training", kube_context=CONTEXT)
    page = urlsplit(kc.job_links(job)["job"])
    assert page.scheme == "https" and page.netloc == "console.cloud.google.com"
    assert page.path == (
        "/kubernetes/job/us-central1/train-cluster/training/kinetic-k0123abcd-2/details"
    )
    assert parse_qs(page.query) == {"project": ["my-proj"]}
    logs = kc.job_links(job)["logs"]
    assert logs.startswith("https://console.cloud.google.com/logs/query;query=")
    query = unquote(logs.split(";query=")[1].split("?")[0])
    assert query.splitlines() == [
        'resource.type="k8s_container"',
        'resource.labels.project_id="my-proj"',
        'resource.labels.location="us-central1"',
        'resource.labels.cluster_name="train-cluster"',
        'resource.labels.namespace_name="training"',
        'labels."k8s-pod/job-name"="kinetic-k0123abcd-2"',
    ]
    assert logs.endswith("?project=my-proj")


def test_unknown_cluster_links_the_projects_workloads_and_default_namespace() -> None:
    job = handle(backend="kubernetes", project="my-proj", kube_context="minikube")
    page = urlsplit(kc.job_links(job)["job"])
    assert page.path == "/kubernetes/workload/overview"
    assert parse_qs(page.query) == {"project": ["my-proj"], "q": ["kinetic-k0123abcd-2"]}
    query = unquote((kc.job_links(job)["logs"]).split(";query=")[1])
    assert 'resource.labels.namespace_name="default"' in query
    assert "cluster_name" not in query


def test_no_web_page_no_link() -> None:
    assert kc.job_links(handle(backend="local")) == {}
    assert kc.job_links(handle(backend="local", project="my-proj")) == {}  # local: no console page
    assert kc.job_links(handle(backend="kubernetes")) == {}  # no GCP project: no console
    files = kc.job_links(handle(storage="gs://bucket/kinetic", backend="local"))
    assert files == {
        "files": "https://console.cloud.google.com/storage/browser/bucket/kinetic/jobs/k0123abcd-2"
    }


def test_every_link_is_http() -> None:
    job = handle(
        storage="gs://b/p", backend="gke", project="p", namespace="n", kube_context="gke_p_eu_c"
    )
    urls = kc.job_links(job)
    assert tuple(urls) == kc.LINK_KINDS
    assert all(url.startswith("https://") for url in urls.values())
