"""What kinetic asks Kubernetes for: the ``batch/v1`` Job (and signing-key Secret) of one job.

Jobs are named deterministically from the job id and labelled ``app=kinetic`` and
``kinetic/job-id``; ``backoffLimit: 0`` because retries belong to the orchestrator;
``activeDeadlineSeconds`` comes from ``active_deadline`` or ``life_span``. The signing key
reaches the runner through the Secret, never through the Job spec. The pod options of the
Target and its ``pod_template`` are translated in ``pod_spec.py``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import os
import re
from typing import Any

from kinetic_core.backends import LaunchSpec
from kinetic_core.backends.kubernetes.accelerators import accelerator_spec
from kinetic_core.backends.kubernetes.image import DEFAULT_IMAGE as DEFAULT_IMAGE
from kinetic_core.backends.kubernetes.image import add_bootstrap, default_image
from kinetic_core.backends.kubernetes.pod_spec import (
    KINETIC_CONTAINER,
    container_options,
    load_pod_template,
    merge_pod_template,
    pod_env,
    pod_spec_options,
)
from kinetic_core.config.target import DEBUG_HOLD, DEBUG_POD_ENV
from kinetic_core.util.envvars import literal_env

TTL_AFTER_FINISHED = 24 * 3600
SPOT_LABEL = "cloud.google.com/gke-spot"

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_KEY = re.compile(r"^([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def job_name(job_id: str) -> str:
    """Deterministic Job name (a DNS-1123 label of at most 63 characters)."""
    name = f"kinetic-{job_id}"
    return (
        name if len(name) <= 63 else f"kinetic-{hashlib.sha256(job_id.encode()).hexdigest()[:20]}"
    )


def valid_labels(raw: dict[str, str]) -> dict[str, str]:
    """Keep the tags that are valid Kubernetes labels (all tags also go into annotations)."""
    return {
        k: v
        for k, v in raw.items()
        if _LABEL_KEY.match(k) and len(v) <= 63 and _LABEL_VALUE.match(v)
    }


def kinetic_labels(spec: LaunchSpec) -> dict[str, str]:
    """The labels of every object of a job: its tags and the Target's, then ours."""
    return {
        **valid_labels({**spec.labels, **(spec.target.labels or {})}),
        "app": "kinetic",
        "kinetic/job-id": spec.job_id,
    }


def job_annotations(spec: LaunchSpec) -> dict[str, str]:
    return {
        **(spec.target.annotations or {}),
        "kinetic/tags": json.dumps(spec.labels),
        "kinetic/storage": spec.storage_uri,
    }


def pod_template(spec: LaunchSpec, extra_env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The pod template of one host of the job: catalogue accelerator (per host), spot,
    resources, pod options and ``pod_template``, image and bootstrap; ``extra_env`` (a
    multi-host worker's identity) is added to the kinetic container's environment."""
    t = spec.target
    selector, extended, tolerations = accelerator_spec(t.accelerator, t.num_hosts).pod_parts()
    if t.spot:
        selector[SPOT_LABEL] = "true"
        tolerations.append(
            {"key": SPOT_LABEL, "operator": "Equal", "value": "true", "effect": "NoSchedule"}
        )
    selector.update(t.node_selector or {})
    tolerations.extend(t.tolerations or [])
    requests: dict[str, Any] = dict((t.resources or {}).get("requests", {}))
    limits: dict[str, Any] = dict((t.resources or {}).get("limits", {}))
    for key in ("cpu", "memory", "ephemeral-storage"):
        if key in (t.resources or {}):
            requests.setdefault(key, t.resources[key])  # type: ignore[index]
            limits.setdefault(key, t.resources[key])  # type: ignore[index]
    for key, count in extended.items():
        requests[key] = limits[key] = str(count)
    labels = kinetic_labels(spec)
    env: list[dict[str, Any]] = [
        *({"name": k, "value": v} for k, v in literal_env(t.env).items()),
        *pod_env(t),
        {"name": "KINETIC_JOB_ID", "value": spec.job_id},
        *(extra_env or []),
        *(debug_env() if t.debug else []),
    ]
    if t.signing_key:
        env.append(
            {
                "name": "KINETIC_SIGNING_KEY",
                "valueFrom": {
                    "secretKeyRef": {"name": job_name(spec.job_id), "key": "signing-key"}
                },
            }
        )
    if t.project:
        env.append({"name": "GOOGLE_CLOUD_PROJECT", "value": t.project})
    env.extend(storage_env(spec.storage_uri))
    container: dict[str, Any] = {
        "name": KINETIC_CONTAINER,
        **({"image": t.image} if t.image else {}),
        "command": ["python", *spec.runner_args()],
        "env": env,
        "resources": {k: v for k, v in (("requests", requests), ("limits", limits)) if v},
        **container_options(t),
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container],
        **({"nodeSelector": selector} if selector else {}),
        **({"tolerations": tolerations} if tolerations else {}),
        **({"serviceAccountName": t.service_account} if t.service_account else {}),
        **pod_spec_options(t),
    }
    container["command"] = add_bootstrap(t, container["command"], container, pod_spec)
    template_meta, pod_spec = merge_pod_template(pod_spec, load_pod_template(t.pod_template))
    if not pod_spec["containers"][0].get("image"):  # neither image= nor the pod template's
        pod_spec["containers"][0]["image"] = default_image(t)
    pod_labels = {**template_meta.get("labels", {}), **labels}
    pod_meta = {
        "labels": pod_labels,
        **({"annotations": template_meta["annotations"]} if "annotations" in template_meta else {}),
    }
    template = {"metadata": pod_meta, "spec": pod_spec}
    if t.backend == "gke":
        add_fuse_volumes(template, pod_spec["containers"][0], spec.fuse_volumes)
    return template


def job_spec(spec: LaunchSpec, template: dict[str, Any]) -> dict[str, Any]:
    """A ``batch/v1`` JobSpec running ``template`` once: no retries (``backoffLimit: 0``,
    they belong to the orchestrator and recovery), TTL, deadline from ``life_span``."""
    t = spec.target
    out: dict[str, Any] = {
        "backoffLimit": 0,
        "ttlSecondsAfterFinished": (
            TTL_AFTER_FINISHED if t.ttl_after_finished is None else t.ttl_after_finished
        ),
        "template": template,
    }
    deadline = t.active_deadline or t.life_span
    if deadline:  # a debug job's failed pod is held: the cluster must not end it first
        out["activeDeadlineSeconds"] = math.ceil(deadline + (DEBUG_HOLD if t.debug else 0))
    return out


def debug_env() -> list[dict[str, Any]]:
    """What the runner of a ``debug=True`` job reports for ``kubectl exec`` (debugging.py):
    its pod's name and namespace (downward API) and its container."""
    pod, namespace, container = DEBUG_POD_ENV
    return [
        {"name": pod, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": namespace, "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": container, "value": KINETIC_CONTAINER},
    ]


def job_manifest(spec: LaunchSpec, namespace: str) -> dict[str, Any]:
    """The Job for ``spec``: catalogue accelerator, spot, resources, labels, deadline."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(spec.job_id),
            "namespace": namespace,
            "labels": kinetic_labels(spec),
            "annotations": job_annotations(spec),
        },
        "spec": job_spec(spec, pod_template(spec)),
    }


def storage_env(storage_uri: str) -> list[dict[str, str]]:
    """A gs:// root served by a GCS emulator (STORAGE_EMULATOR_HOST where the job is
    submitted) is served by the same emulator in the pod: the job must reach the storage
    its submitter wrote."""
    host = os.environ.get("STORAGE_EMULATOR_HOST")
    if storage_uri.startswith("gs://") and host:
        return [{"name": "STORAGE_EMULATOR_HOST", "value": host}]
    return []


FUSE_DRIVER = "gcsfuse.csi.storage.gke.io"


def add_fuse_volumes(
    template: dict[str, Any], container: dict[str, Any], volumes: dict[str, str]
) -> None:
    """Mount each ``gs://bucket/prefix/`` at its path through the GCS FUSE CSI driver
    (``volumes={path: Data(uri, fuse=True)}`` on GKE); the runner finds them mounted."""
    if not volumes:
        return
    annotations = template.setdefault("metadata", {}).setdefault("annotations", {})
    annotations["gke-gcsfuse/volumes"] = "true"
    pod_volumes = template["spec"].setdefault("volumes", [])
    mounts = container.setdefault("volumeMounts", [])
    for index, (path, uri) in enumerate(sorted(volumes.items())):
        bucket, _, prefix = uri[len("gs://") :].partition("/")
        attributes = {"bucketName": bucket}
        if prefix.strip("/"):
            attributes["mountOptions"] = f"only-dir={prefix.strip('/')}"
        name = f"kinetic-data-{index}"
        pod_volumes.append(
            {"name": name, "csi": {"driver": FUSE_DRIVER, "volumeAttributes": attributes}}
        )
        mounts.append({"name": name, "mountPath": path, "readOnly": True})


def secret_manifest(spec: LaunchSpec) -> dict[str, Any]:
    """The Secret holding the signing key; named like the Job, which owns it from its
    creation (``backend.create_job`` adds the owner reference)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": job_name(spec.job_id),
            "labels": {"app": "kinetic", "kinetic/job-id": spec.job_id},
        },
        "data": {
            "signing-key": base64.b64encode((spec.target.signing_key or "").encode()).decode()
        },
    }


def owner_patch(name: str, job: dict[str, Any]) -> dict[str, Any]:
    """Merge patch making ``job`` (a Job or JobSet named ``name``, as the API returned it)
    own a resource."""
    owner = {
        "apiVersion": job.get("apiVersion", "batch/v1"),
        "kind": job.get("kind", "Job"),
        "name": name,
        "uid": job["metadata"]["uid"],
        "blockOwnerDeletion": False,
    }
    return {"metadata": {"ownerReferences": [owner]}}
