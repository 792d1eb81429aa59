"""The kubernetes / gke kind: what the core asks of this backend without a connection.

Both names are this one kind: a GKE cluster is a Kubernetes cluster, so options, checks,
Job names, console links and a driver pod's credentials are the same for both. Imported by
every ``Target.validate``, so it never imports the Kubernetes client library (``create``
loads the backend module, and says which extra is missing when it is).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kinetic_core.backends import Backend, BackendKind, Shape, hosts_asked
from kinetic_core.backends.kubernetes.accelerators import accelerator_spec
from kinetic_core.backends.kubernetes.console import console_links
from kinetic_core.backends.kubernetes.image import DEFAULT_IMAGE, check_requirements
from kinetic_core.backends.kubernetes.manifest import job_name, valid_labels
from kinetic_core.backends.kubernetes.pod_options import POD_OPTIONS, check_pod_options
from kinetic_core.errors import ConfigError
from kinetic_core.util import registry

if TYPE_CHECKING:
    from kinetic_core.config.target import Target

#: Where the cluster is and how to reach it: what makes two backend instances differ.
CONNECTION_FIELDS = (
    "storage",
    "kube_context",
    "kubeconfig",
    "in_cluster",
    "namespace",
    "project",
    "signing_key",
)


class KubernetesKind:
    """One ``batch/v1`` Job per job (a JobSet for a multi-host or queued one); its pods
    mount volumes."""

    options = frozenset(
        {
            "namespace",
            "image",
            "accelerator",
            "num_hosts",
            "spot",
            "resources",
            "service_account",
            "kube_context",
            "kubeconfig",
            "in_cluster",
            "node_selector",
            "tolerations",
            "labels",
            "annotations",
            "project",
            "requirements",
            "queue",
            "priority",
            "queue_timeout",
            *POD_OPTIONS,
        }
    )
    supports_volumes = True
    #: A job may span several hosts (``num_hosts``, a multi-host slice): a JobSet.
    multi_host = True

    def create(self, target: Target) -> Backend:
        module = registry.import_module(f"{__package__}.backend", f"{target.backend} backend")
        backend: Backend = module.KubernetesBackend.from_target(target)
        return backend

    def cache_key(self, target: Target) -> tuple[object, ...]:
        # lost_grace: the backend's poll applies it (a lost node's pods), so it is per instance.
        return (*(getattr(target, name) for name in CONNECTION_FIELDS), target.lost_grace)

    def check_options(self, target: Target) -> None:
        """The kubeconfig and the pod options, as plain data, before anything is written."""
        kubeconfig = target.kubeconfig
        if kubeconfig is not None and (not isinstance(kubeconfig, str) or not kubeconfig.strip()):
            raise ConfigError(
                "kubeconfig is empty: give the path of a kubeconfig file or its content (YAML), "
                "or leave it unset ($KUBECONFIG, ~/.kube/config)."
            )
        check_pod_options(**{name: getattr(target, name) for name in POD_OPTIONS})
        check_shape(target)
        check_requirements(target.requirements)

    def job_object_name(self, job_id: str) -> str | None:
        """The Job (and its pods' ``job-name`` label) the job runs as."""
        return job_name(job_id)

    def links(self, job_id: str, target: Mapping[str, Any]) -> dict[str, str]:
        return console_links(job_name(job_id), target)

    def driver_overlay(self, target: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
        """In a pod, a batch driver reaches the API with the pod's service account (the
        submitter's kubeconfig is not there); elsewhere, as the batch's target says.

        Without an image, the submitter was allowed the default one (its API server was a
        local cluster's); the in-cluster address is not loopback, so the driver keeps
        that image for the children instead of deciding again."""
        if not env.get("KUBERNETES_SERVICE_HOST"):
            return {}
        chosen = target.get("image") or target.get("pod_template")
        return {"in_cluster": True, **({} if chosen else {"image": DEFAULT_IMAGE})}

    def shape(self, target: Mapping[str, Any]) -> Shape:
        """From the accelerator catalogue: a TPU slice fixes its own hosts, a GPU shape is
        spread over ``num_hosts``."""
        hosts = hosts_asked(target)
        accelerator = target.get("accelerator")
        try:
            spec = accelerator_spec(accelerator if isinstance(accelerator, str) else None)
        except ConfigError:  # a name this version does not know: its chips are unknown
            return Shape(hosts=hosts)
        if spec.kind == "tpu":
            return Shape(hosts=max(hosts, spec.hosts), chips=spec.chips)
        return Shape(hosts=hosts, chips=spec.chips_per_host * hosts)


def check_shape(target: Target) -> None:
    """The accelerator and num_hosts name a known shape (a multi-host one runs as a JobSet,
    checked served at launch; any other backend refuses it: interfaces point 4), and the
    Kueue queue and priority are label values."""
    hosts = accelerator_spec(target.accelerator, target.num_hosts).hosts
    if hosts > 1 and not getattr(registry.backend_kind(target.backend), "multi_host", False):
        # checked here because these options are this kind's: a local job is one process
        raise ConfigError(
            f"{hosts} hosts: the {target.backend or 'local'} backend runs a job as one process "
            "on this machine, never a multi-host job (num_hosts > 1 or a multi-host slice such "
            "as tpu-v5e-16). Run it on Kubernetes/GKE (backend='gke' or 'kubernetes'), or "
            "leave num_hosts unset and pick a single-host accelerator here (Slurm: backend='slurm' "
            "runs num_hosts nodes as one allocation)."
        )
    for name in ("queue", "priority"):
        value = getattr(target, name)
        if value is not None and (not isinstance(value, str) or not valid_labels({"k": value})):
            raise ConfigError(
                f"{name} must be a Kueue {'LocalQueue' if name == 'queue' else 'priority class'} "
                f"name (a Kubernetes label value: at most 63 letters, digits, '-', '_', '.'), "
                f"got {value!r}."
            )
    if target.queue_timeout is not None and not target.queue:
        raise ConfigError(
            "queue_timeout bounds the wait for Kueue's admission: set queue= (the LocalQueue) "
            "too, or drop queue_timeout (schedule_timeout bounds an unqueued job's wait)."
        )


KIND: BackendKind = KubernetesKind()
