"""kubernetes / gke backend: one ``batch/v1`` Job per kinetic job.

Jobs are named deterministically from the job id and labelled ``app=kinetic`` and
``kinetic/job-id``; ``backoffLimit: 0`` because retries belong to the orchestrator;
``activeDeadlineSeconds`` comes from ``life_span``. ``poll`` makes one label-selected LIST
of Jobs and one of Pods per namespace for every watched job. The signing key reaches the
runner through a per-job Secret owned by the Job, never through the Job spec.

Requests go through the official client's transport (kubeconfig, in-cluster, auth, TLS)
as plain JSON, with one tenacity policy for transient errors.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import threading
from datetime import datetime
from typing import Any

from tenacity import (
    retry,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from kinetic_core.backends import BackendState, LaunchSpec
from kinetic_core.config import Target
from kinetic_core.errors import ConfigError, SubmissionError

DEFAULT_IMAGE = "kinetic-workflows-runner:0.1.0"
USER_AGENT = "kinetic-workflows/0.1.0"
DEFAULT_NAMESPACE = "default"
TTL_AFTER_FINISHED = 24 * 3600
GPU_KEY, TPU_KEY = "nvidia.com/gpu", "google.com/tpu"
SPOT_LABEL = "cloud.google.com/gke-spot"
LOG_CHUNK_LINES = 5000

# name -> (node selector, extended resources). TPU topologies follow GKE's podslice naming.
ACCELERATORS: dict[str, tuple[dict[str, str], dict[str, int]]] = {
    "cpu": ({}, {}),
    **{
        f"gpu-{short}": ({"cloud.google.com/gke-accelerator": gke}, {GPU_KEY: 1})
        for short, gke in {
            "t4": "nvidia-tesla-t4",
            "l4": "nvidia-l4",
            "a100": "nvidia-tesla-a100",
            "a100-80gb": "nvidia-a100-80gb",
            "h100": "nvidia-h100-80gb",
        }.items()
    },
    **{
        name: (
            {
                "cloud.google.com/gke-tpu-accelerator": kind,
                "cloud.google.com/gke-tpu-topology": topo,
            },
            {TPU_KEY: chips},
        )
        for name, kind, topo, chips in (
            ("tpu-v5e-1", "tpu-v5-lite-podslice", "1x1", 1),
            ("tpu-v5e-4", "tpu-v5-lite-podslice", "2x2", 4),
            ("tpu-v5e-8", "tpu-v5-lite-podslice", "2x4", 8),
            ("tpu-v5litepod-1", "tpu-v5-lite-podslice", "1x1", 1),
            ("tpu-v5litepod-4", "tpu-v5-lite-podslice", "2x2", 4),
            ("tpu-v5litepod-8", "tpu-v5-lite-podslice", "2x4", 8),
            ("tpu-v4-8", "tpu-v4-podslice", "2x2x1", 4),
            ("tpu-v6e-8", "tpu-v6e-slice", "2x4", 8),
        )
    },
}
_GPU_COUNT = re.compile(r"^(gpu-[a-z0-9-]+?)x(\d+)$")  # e.g. gpu-l4x4: four L4s


def accelerator_spec(
    name: str | None,
) -> tuple[dict[str, str], dict[str, int], list[dict[str, Any]]]:
    """Node selector, extended resources and tolerations for a catalogue accelerator."""
    if not name:
        return {}, {}, []
    count = 1
    match = _GPU_COUNT.match(name)
    if match and match.group(1) in ACCELERATORS:
        name, count = match.group(1), int(match.group(2))
    if name not in ACCELERATORS:
        raise ConfigError(
            f"Unknown accelerator {name!r}; choose one of {', '.join(sorted(ACCELERATORS))} "
            "(GPUs also as gpu-l4x4 for four), or set node_selector/resources yourself."
        )
    selector, resources = ACCELERATORS[name]
    resources = {k: v * count for k, v in resources.items()}
    tolerations = [{"key": k, "operator": "Exists", "effect": "NoSchedule"} for k in resources]
    return dict(selector), resources, tolerations


def job_name(job_id: str) -> str:
    """Deterministic Job name (a DNS-1123 label of at most 63 characters)."""
    name = f"kinetic-{job_id}"
    return (
        name if len(name) <= 63 else f"kinetic-{hashlib.sha256(job_id.encode()).hexdigest()[:20]}"
    )


_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_KEY = re.compile(r"^([a-z0-9.-]{1,253}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def _labels(raw: dict[str, str]) -> dict[str, str]:
    """Keep the tags that are valid Kubernetes labels (all tags also go into annotations)."""
    return {
        k: v
        for k, v in raw.items()
        if _LABEL_KEY.match(k) and len(v) <= 63 and _LABEL_VALUE.match(v)
    }


class KubeApiError(Exception):
    def __init__(self, status: int, body: str, what: str) -> None:
        self.status = status
        self.body = body
        try:
            self.reason = json.loads(body).get("message", body)
        except ValueError:
            self.reason = body
        super().__init__(f"{what}: HTTP {status}: {self.reason}")


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, KubeApiError):
        return exc.status in (429, 500, 502, 503, 504)
    import urllib3

    return isinstance(exc, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError)


# The one retry policy for every API call.
api_retry = retry(
    retry=retry_if_exception(_transient),
    wait=wait_exponential_jitter(initial=0.2, max=5),
    stop=stop_after_attempt(6),
    reraise=True,
)


class KubernetesBackend:
    """Backend for any Kubernetes; ``gke`` is this backend with GKE's accelerator labels."""

    def __init__(self, target: Target) -> None:
        self.name = target.backend or "kubernetes"
        self.namespace = target.namespace or DEFAULT_NAMESPACE
        self.context = target.kube_context
        self.in_cluster = bool(target.in_cluster)
        self._api: Any = None
        self._lock = threading.Lock()

    @classmethod
    def from_target(cls, target: Target) -> KubernetesBackend:
        return cls(target)

    @property
    def scope(self) -> str:
        where = "in-cluster" if self.in_cluster else (self.context or "current-context")
        return f"kubernetes:{where}/{self.namespace}"

    # ---- transport ----------------------------------------------------------------------
    @property
    def api(self) -> Any:
        with self._lock:
            if self._api is None:
                from kubernetes import client, config

                try:
                    if self.in_cluster:
                        cfg = client.Configuration()
                        config.load_incluster_config(client_configuration=cfg)
                        self._api = client.ApiClient(cfg)
                    else:  # KUBECONFIG read now, not when the client module was imported
                        self._api = config.new_client_from_config(
                            config_file=os.environ.get("KUBECONFIG", "~/.kube/config").split(
                                os.pathsep
                            )[0],
                            context=self.context,
                        )
                    self._api.user_agent = USER_AGENT
                except Exception as exc:
                    where = (
                        "in-cluster"
                        if self.in_cluster
                        else f"context {self.context or 'current-context'}"
                    )
                    raise ConfigError(
                        f"Cannot load Kubernetes credentials ({where}): {exc}. "
                        "Check KUBECONFIG / kube_context, or set in_cluster=True inside a pod."
                    ) from exc
            return self._api

    @api_retry
    def _call(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        what: str = "",
        raw: bool = False,
    ) -> Any:
        params = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=[(k, v) for k, v in (query or {}).items() if v is not None],
            header_params={"Accept": "application/json", "Content-Type": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api.call_api(*params, _request_timeout=30)
        data = response.read()
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data or "")
        if response.status in (401, 403):
            raise ConfigError(
                f"Kubernetes rejected the credentials of context {self.context or 'current-context'} "
                f"(HTTP {response.status}) for {method} {path}: refresh them (e.g. `gcloud container "
                "clusters get-credentials …`) or grant the service account access to Jobs, Pods, "
                f"pods/log and Secrets in namespace {self.namespace}."
            )
        if response.status >= 400:
            raise KubeApiError(response.status, text, what or f"{method} {path}")
        return text if raw else (json.loads(text) if text else {})

    def _ns(self, kind: str, name: str | None = None) -> str:
        group = "/apis/batch/v1" if kind == "jobs" else "/api/v1"
        return f"{group}/namespaces/{self.namespace}/{kind}" + (f"/{name}" if name else "")

    # ---- manifests ----------------------------------------------------------------------
    def manifest(self, spec: LaunchSpec) -> dict[str, Any]:
        t = spec.target
        selector, extended, tolerations = accelerator_spec(t.accelerator)
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
        labels = {
            **_labels({**spec.labels, **(t.labels or {})}),
            "app": "kinetic",
            "kinetic/job-id": spec.job_id,
        }
        env: list[dict[str, Any]] = [{"name": "KINETIC_JOB_ID", "value": spec.job_id}]
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
        container: dict[str, Any] = {
            "name": "runner",
            "image": t.image or DEFAULT_IMAGE,
            "command": ["python", *spec.runner_args()],
            "env": env,
            "resources": {k: v for k, v in (("requests", requests), ("limits", limits)) if v},
        }
        pod_spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "containers": [container],
            **({"nodeSelector": selector} if selector else {}),
            **({"tolerations": tolerations} if tolerations else {}),
            **({"serviceAccountName": t.service_account} if t.service_account else {}),
        }
        job_spec: dict[str, Any] = {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": TTL_AFTER_FINISHED,
            "template": {"metadata": {"labels": labels}, "spec": pod_spec},
        }
        if t.life_span:
            job_spec["activeDeadlineSeconds"] = math.ceil(t.life_span)
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": job_name(spec.job_id),
                "namespace": self.namespace,
                "labels": labels,
                "annotations": {
                    **(t.annotations or {}),
                    "kinetic/tags": json.dumps(spec.labels),
                    "kinetic/storage": spec.storage_uri,
                },
            },
            "spec": job_spec,
        }

    # ---- launch -------------------------------------------------------------------------
    def launch(self, spec: LaunchSpec) -> None:
        """Create the Job (idempotent: an existing Job for this id counts as launched)."""
        self.create_job(spec)

    def create_job(self, spec: LaunchSpec, *, dry_run: bool = False) -> dict[str, Any]:
        """Create (or with ``dry_run`` server-side validate) the Job; returns what the API says."""
        manifest = self.manifest(spec)
        name = manifest["metadata"]["name"]
        query = {"dryRun": "All"} if dry_run else None
        if spec.target.signing_key and not dry_run:
            self._create_secret(name, spec)
        try:
            created: dict[str, Any] = self._call(
                "POST", self._ns("jobs"), body=manifest, query=query, what=f"create Job {name}"
            )
        except KubeApiError as exc:
            if exc.status == 409:
                return {}
            if exc.status in (400, 422):
                raise SubmissionError(f"Kubernetes rejected Job {name}: {exc.reason}") from exc
            try:  # the create may have succeeded before the error reached us
                return dict(self._call("GET", self._ns("jobs", name)))
            except KubeApiError:
                raise SubmissionError(f"Could not create Job {name}: {exc}") from exc
        if spec.target.signing_key and not dry_run:
            self._own_secret(name, created)
        return created

    def _create_secret(self, name: str, spec: LaunchSpec) -> None:
        import base64

        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {"name": name, "labels": {"app": "kinetic", "kinetic/job-id": spec.job_id}},
            "data": {
                "signing-key": base64.b64encode((spec.target.signing_key or "").encode()).decode()
            },
        }
        try:
            self._call("POST", self._ns("secrets"), body=secret, what=f"create Secret {name}")
        except KubeApiError as exc:
            if exc.status != 409:
                raise SubmissionError(f"Could not create Secret {name}: {exc}") from exc

    def _own_secret(self, name: str, job: dict[str, Any]) -> None:
        """Make the Job own its Secret so Kubernetes deletes both together."""
        owner = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": name,
            "uid": job["metadata"]["uid"],
            "blockOwnerDeletion": False,
        }
        params = self.api.param_serialize(
            method="PATCH",
            resource_path=self._ns("secrets", name),
            header_params={
                "Content-Type": "application/merge-patch+json",
                "Accept": "application/json",
            },
            body={"metadata": {"ownerReferences": [owner]}},
            auth_settings=["BearerToken"],
        )
        self.api.call_api(*params, _request_timeout=30).read()

    # ---- poll ---------------------------------------------------------------------------
    def poll(self, job_ids: list[str]) -> dict[str, BackendState]:
        """One LIST of Jobs and one LIST of Pods (label app=kinetic) for all ``job_ids``."""
        jobs = self._call("GET", self._ns("jobs"), query={"labelSelector": "app=kinetic"})["items"]
        pods = self._call("GET", self._ns("pods"), query={"labelSelector": "app=kinetic"})["items"]
        by_job = {j["metadata"]["labels"].get("kinetic/job-id"): j for j in jobs}
        pods_by_job: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            pods_by_job.setdefault(pod["metadata"]["labels"].get("kinetic/job-id", ""), []).append(
                pod
            )
        return {
            job_id: job_state(by_job.get(job_id), pods_by_job.get(job_id, [])) for job_id in job_ids
        }

    # ---- logs ---------------------------------------------------------------------------
    def _pod_name(self, job_id: str) -> str | None:
        pods = self._call(
            "GET", self._ns("pods"), query={"labelSelector": f"kinetic/job-id={job_id}"}
        )["items"]
        pods.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""))
        return pods[-1]["metadata"]["name"] if pods else None

    def _log(self, job_id: str, **query: Any) -> str:
        pod = self._pod_name(job_id)
        if pod is None:
            return ""
        try:
            return str(
                self._call(
                    "GET",
                    self._ns("pods", pod) + "/log",
                    query=query,
                    raw=True,
                    what=f"logs of pod {pod}",
                )
            )
        except KubeApiError as exc:
            if exc.status in (400, 404):  # container not started yet, or pod gone
                return ""
            raise

    def logs(self, job_id: str, tail: int | None = None) -> str:
        return self._log(job_id, tailLines=tail)

    def read_logs(self, job_id: str, cursor: str | None) -> tuple[str, str | None]:
        """New lines since ``cursor`` ("<RFC3339 timestamp>|<lines seen at it>")."""
        since, seen = cursor.split("|") if cursor else ("", "0")
        text = self._log(job_id, timestamps="true", sinceTime=since or None, limitBytes=8 << 20)
        out: list[str] = []
        last, count = since, int(seen)
        skip = count
        for line in text.splitlines():
            stamp, _, content = line.partition(" ")
            if since and stamp < since:
                continue
            if stamp == since and skip > 0:
                skip -= 1
                continue
            out.append(content)
            count = count + 1 if stamp == last else 1
            last = stamp
            if len(out) >= LOG_CHUNK_LINES:
                break
        if not out:
            return "", cursor
        return "\n".join(out) + "\n", f"{last}|{count}"

    # ---- stop ---------------------------------------------------------------------------
    def cancel(self, job_id: str) -> None:
        """Delete the Job and its pods (foreground propagation); absent is fine."""
        name = job_name(job_id)
        for kind, path in (("Job", self._ns("jobs", name)), ("Secret", self._ns("secrets", name))):
            try:
                self._call(
                    "DELETE",
                    path,
                    body={"propagationPolicy": "Foreground"},
                    what=f"delete {kind} {name}",
                )
            except KubeApiError as exc:
                if exc.status != 404:
                    raise

    delete = cancel

    def discover(self, selector: dict[str, str]) -> list[str]:
        labels = ",".join(["app=kinetic", *(f"{k}={v}" for k, v in selector.items())])
        jobs = self._call("GET", self._ns("jobs"), query={"labelSelector": labels})["items"]
        return sorted(j["metadata"]["labels"]["kinetic/job-id"] for j in jobs)


def _ts(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def job_state(job: dict[str, Any] | None, pods: list[dict[str, Any]]) -> BackendState:
    """Translate a Job and its pods into a BackendState with a reason a person can act on."""
    if job is None:
        return BackendState(
            "not_found",
            message="the Kubernetes Job does not exist (deleted, or expired by its TTL)",
        )
    status = job.get("status", {})
    pod = max(pods, key=lambda p: p["metadata"].get("creationTimestamp", "")) if pods else None
    pod_status = (pod or {}).get("status", {})
    started = _ts(status.get("startTime"))
    cstatus = (pod_status.get("containerStatuses") or [{}])[0]
    terminated = cstatus.get("state", {}).get("terminated") or {}
    waiting = cstatus.get("state", {}).get("waiting") or {}
    exit_code = terminated.get("exitCode")
    conditions = {c["type"]: c for c in status.get("conditions", []) if c.get("status") == "True"}
    finished = _ts(status.get("completionTime")) or _ts(terminated.get("finishedAt"))

    evicted = pod_status.get("reason") == "Evicted" or any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        for c in pod_status.get("conditions", [])
    )
    if evicted:
        return BackendState(
            "exited",
            exit_code=exit_code,
            reason="Preempted",
            started_at=started,
            finished_at=finished,
            message=pod_status.get("message") or "the pod was evicted or preempted",
        )
    if "Complete" in conditions:
        return BackendState(
            "exited", exit_code=0, reason="Completed", started_at=started, finished_at=finished
        )
    if "Failed" in conditions:
        cond = conditions["Failed"]
        if cond.get("reason") == "DeadlineExceeded":
            return BackendState(
                "exited",
                exit_code=exit_code,
                reason="DeadlineExceeded",
                started_at=started,
                finished_at=finished,
                message=cond.get("message") or "activeDeadlineSeconds exceeded",
            )
        return _terminated_state(terminated, started, finished, cond.get("message"))
    if terminated:
        return _terminated_state(terminated, started, finished, None)
    if pod_status.get("phase") == "Running":
        return BackendState(
            "running",
            started_at=_ts(cstatus.get("state", {}).get("running", {}).get("startedAt")) or started,
        )
    if waiting.get("reason") in ("ImagePullBackOff", "ErrImagePull", "InvalidImageName"):
        return BackendState("pending", reason="ImagePullBackOff", message=waiting.get("message"))
    if waiting.get("reason"):
        return BackendState("pending", reason=waiting["reason"], message=waiting.get("message"))
    for cond in pod_status.get("conditions", []):
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return BackendState(
                "pending", reason=cond.get("reason") or "Unschedulable", message=cond.get("message")
            )
    return BackendState("pending", started_at=started)


def _terminated_state(
    terminated: dict[str, Any], started: float | None, finished: float | None, fallback: str | None
) -> BackendState:
    code = terminated.get("exitCode")
    reason = terminated.get("reason")
    if reason == "OOMKilled":
        return BackendState(
            "exited",
            exit_code=code,
            reason="OOMKilled",
            started_at=started,
            finished_at=finished,
            message="the container exceeded its memory limit; raise resources['memory']",
        )
    if code == 0 and reason in (None, "Completed"):
        return BackendState(
            "exited", exit_code=0, reason="Completed", started_at=started, finished_at=finished
        )
    message = terminated.get("message") or fallback or f"container exited with code {code}"
    return BackendState(
        "exited",
        exit_code=code,
        reason="Error",
        started_at=started,
        finished_at=finished,
        message=message,
    )
