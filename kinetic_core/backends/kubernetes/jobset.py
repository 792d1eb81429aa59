"""A multi-host (or queued) job as ONE JobSet (``jobset.x-k8s.io/v1alpha2``): what GKE
documents for multi-host TPU slices and what Kueue admits as one workload.

One replicatedJob ``workers`` of ``replicas`` = hosts child Jobs of one pod each
(parallelism 1, completions 1, ``backoffLimit: 0``: 1.20 has no Indexed Jobs), the pod
template being the single-host job's (``manifest.pod_template``) plus the worker's identity
(``KINETIC_WORKER_*``, read by ``kinetic_core.util.workers``). ``network.enableDNSHostnames``
gives each pod the stable hostname ``<jobset>-workers-<i>-0.<jobset>`` through a headless
Service named like the JobSet. ``failurePolicy.maxRestarts: 0``: one failed worker fails
the JobSet and JobSet stops the others; kinetic's own recovery makes the next attempt (a
new job id), so the JobSet never restarts itself. ``ttlSecondsAfterFinished``: the
single-host Job's (``Target.ttl_after_finished``, default a day): JobSet deletes a finished
JobSet that long after its Completed/Failed condition, foreground, so its Jobs, pods,
Service, and the Secret and Kueue Workload it owns go with it (JobSet v0.5+; an older
JobSet CRD prunes the field, and the JobSet stays until ``cleanup()``).

Kueue: ``queue=`` sets the ``kueue.x-k8s.io/queue-name`` label, ``priority=`` the
``kueue.x-k8s.io/priority-class`` label, and the JobSet is created suspended: Kueue
unsuspends it when it admits the workload (its child Jobs, and their
``activeDeadlineSeconds``, start then). A queued single-host job is a JobSet of one
worker, because a 1.20 Job cannot be suspended.

Upstream: jobset v0.12.0 ``api/jobset/v1alpha2/jobset_types.go``; kueue v0.19.2
``pkg/controller/constants`` (label names).
"""

from __future__ import annotations

from typing import Any

from kinetic_core.backends import LaunchSpec
from kinetic_core.backends.kubernetes.accelerators import accelerator_spec
from kinetic_core.backends.kubernetes.manifest import (
    job_annotations,
    job_name,
    job_spec,
    kinetic_labels,
    pod_template,
)
from kinetic_core.config.target import Target

GROUP = "jobset.x-k8s.io"
VERSION = "v1alpha2"
API_VERSION = f"{GROUP}/{VERSION}"
REPLICATED_JOB = "workers"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
COORDINATOR_PORT = 8476
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
INSTALL_DOCS = "https://jobset.sigs.k8s.io/docs/installation/"


def hosts(target: Target) -> int:
    """How many hosts (pods) the job spans."""
    return accelerator_spec(target.accelerator, target.num_hosts).hosts


def needs_jobset(target: Target) -> bool:
    """A job of several hosts, or a queued one (a 1.20 Job cannot be suspended)."""
    return hosts(target) > 1 or bool(target.queue)


def hostnames(name: str, count: int) -> list[str]:
    """The stable hostname of each worker: ``<jobset>-workers-<i>-0.<subdomain>``."""
    return [f"{name}-{REPLICATED_JOB}-{i}-0.{name}" for i in range(count)]


def worker_env(name: str, count: int) -> list[dict[str, Any]]:
    """The worker's identity (interfaces point 1): its index from the annotation JobSet
    puts on its pod, the count, every hostname, and worker 0's address."""
    names = hostnames(name, count)
    return [
        {
            "name": "KINETIC_WORKER_INDEX",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{JOB_INDEX}']"}},
        },
        {"name": "KINETIC_WORKER_COUNT", "value": str(count)},
        {"name": "KINETIC_WORKER_HOSTNAMES", "value": ",".join(names)},
        {"name": "KINETIC_COORDINATOR_ADDRESS", "value": f"{names[0]}:{COORDINATOR_PORT}"},
    ]


def queue_labels(target: Target) -> dict[str, str]:
    return {
        **({QUEUE_LABEL: target.queue} if target.queue else {}),
        **({PRIORITY_LABEL: target.priority} if target.priority else {}),
    }


def jobset_manifest(spec: LaunchSpec, namespace: str) -> dict[str, Any]:
    """The JobSet of ``spec``, named like its single-host Job would be (``job_name``)."""
    name = job_name(spec.job_id)
    count = hosts(spec.target)
    template = pod_template(spec, worker_env(name, count) if count > 1 else None)
    labels = kinetic_labels(spec)
    child = job_spec(spec, template)
    child.update(parallelism=1, completions=1)
    return {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**labels, **queue_labels(spec.target)},
            "annotations": job_annotations(spec),
        },
        "spec": {
            "suspend": bool(spec.target.queue),
            "network": {"enableDNSHostnames": True, "subdomain": name},
            "failurePolicy": {"maxRestarts": 0},
            # The single-host Job's lifetime once finished: the JobSet (its Jobs, pods and
            # Service, and the Secret and Workload it owns) goes with its TTL too.
            "ttlSecondsAfterFinished": child["ttlSecondsAfterFinished"],
            "successPolicy": {"operator": "All"},
            "replicatedJobs": [
                {
                    "name": REPLICATED_JOB,
                    "replicas": count,
                    "template": {"metadata": {"labels": labels}, "spec": child},
                }
            ],
        },
    }
