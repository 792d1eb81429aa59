"""The kubernetes / gke backend: one ``batch/v1`` Job per kinetic job.

``poll`` makes one LIST of Jobs and one of Pods per namespace, label-selected by the
watched job ids (``kinetic/job-id in (...)``), so its cost follows the jobs watched, not
the finished Jobs kept in the namespace; a node is read only when a pod on it stops being
Ready (to tell a lost node). Manifests come from ``manifest.py``, states from
``states.py``; every request goes through ``client.KubeClient.call`` (retries, error
mapping).
"""

from __future__ import annotations

import time
from typing import Any

from kinetic_core.backends import BackendState, LaunchSpec
from kinetic_core.backends.kubernetes.client import KubeApiError, KubeClient
from kinetic_core.backends.kubernetes.manifest import (
    job_manifest,
    job_name,
    owner_patch,
    secret_manifest,
    valid_labels,
)
from kinetic_core.backends.kubernetes.pod_spec import KINETIC_CONTAINER
from kinetic_core.backends.kubernetes.states import job_state, pod_not_ready
from kinetic_core.config import Target
from kinetic_core.errors import BackendError, ConfigError, SubmissionError

LOG_CHUNK_LINES = 5000
# Job ids per label-selected LIST: keeps the request URL well under server limits.
POLL_CHUNK = 400


class KubernetesBackend:
    """Backend for any Kubernetes; ``gke`` is this backend with GKE's accelerator labels."""

    def __init__(self, target: Target) -> None:
        self.name = target.backend or "kubernetes"
        self.client = KubeClient(target)
        self.namespace = self.client.namespace

    @classmethod
    def from_target(cls, target: Target) -> KubernetesBackend:
        return cls(target)

    @property
    def scope(self) -> str:
        return f"kubernetes:{self.client.where}/{self.namespace}"

    # ---- launch -------------------------------------------------------------------------
    def check_launch(self, spec: LaunchSpec) -> None:
        """Build the Job without sending it: a bad pod option or template raises ConfigError
        before the submission writes anything."""
        job_manifest(spec, self.namespace)

    def launch(self, spec: LaunchSpec) -> None:
        """Create the Job (idempotent: an existing Job for this id counts as launched)."""
        self.create_job(spec)

    def create_job(self, spec: LaunchSpec, *, dry_run: bool = False) -> dict[str, Any]:
        """Create (or with ``dry_run`` server-side validate) the Job; returns what the API says.

        The signing-key Secret is created after the Job, already owned by it: no moment
        exists where a Secret could be left without an owner (a rejected Job creates no
        Secret; a submitter dying after the Job leaves a pod waiting for its Secret, pending
        with reason CreateContainerConfigError until ``schedule_timeout`` ends it, and
        launching the same id again creates the Secret)."""
        manifest = job_manifest(spec, self.namespace)
        name = manifest["metadata"]["name"]
        jobs = self.client.ns("jobs")
        query = {"dryRun": "All"} if dry_run else None
        try:
            created: dict[str, Any] = self.client.call(
                "POST", jobs, body=manifest, query=query, what=f"create Job {name}"
            )
        except BackendError as exc:
            if isinstance(exc, KubeApiError) and exc.status in (400, 422):
                raise SubmissionError(f"Kubernetes rejected Job {name}: {exc.reason}") from exc
            try:  # it exists (409), or the create succeeded before the error reached us
                created = dict(self.client.call("GET", self.client.ns("jobs", name)))
            except BackendError as missing:
                if exc.transient or missing.transient:  # it may exist: launch again, never final
                    raise exc from None
                raise SubmissionError(f"Could not create Job {name}: {exc}") from exc
            if exc.status == 409 and not spec.target.signing_key:
                return {}
        if spec.target.signing_key and not dry_run:
            self._create_secret(spec, created)
        return created

    def _create_secret(self, spec: LaunchSpec, job: dict[str, Any]) -> None:
        """The signing-key Secret, owned by ``job`` from its creation."""
        name = job_name(spec.job_id)
        body = secret_manifest(spec)
        body["metadata"].update(owner_patch(name, job)["metadata"])
        try:
            self.client.call(
                "POST", self.client.ns("secrets"), body=body, what=f"create Secret {name}"
            )
        except BackendError as exc:
            if exc.status != 409:
                raise SubmissionError(f"Could not create Secret {name}: {exc}") from exc

    # ---- poll ---------------------------------------------------------------------------
    def poll(self, job_ids: list[str]) -> dict[str, BackendState]:
        """One LIST of Jobs and one LIST of Pods, selected by the ids of ``job_ids``."""
        # An id that is no label value cannot have been launched (its Job would be invalid).
        ids = sorted({j for j in job_ids if valid_labels({"id": j})})
        jobs: list[dict[str, Any]] = []
        pods: list[dict[str, Any]] = []
        for start in range(0, len(ids), POLL_CHUNK):
            chunk = ",".join(ids[start : start + POLL_CHUNK])
            query = {"labelSelector": f"app=kinetic,kinetic/job-id in ({chunk})"}
            jobs += self.client.call("GET", self.client.ns("jobs"), query=query)["items"]
            pods += self.client.call("GET", self.client.ns("pods"), query=query)["items"]
        by_job = {j["metadata"]["labels"].get("kinetic/job-id"): j for j in jobs}
        pods_by_job: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            job_id = pod["metadata"]["labels"].get("kinetic/job-id", "")
            pods_by_job.setdefault(job_id, []).append(pod)
        nodes = self._nodes_of(pods)
        return {
            job_id: job_state(by_job.get(job_id), pods_by_job.get(job_id, []), nodes)
            for job_id in job_ids
        }

    def _nodes_of(self, pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The Nodes of pods that run but stopped being Ready: is their node lost?
        Nothing is read while every pod is fine. Without permission to read Nodes the
        answer is "unknown" (an empty dict), never an error of the poll."""
        names = {p["spec"].get("nodeName") for p in pods if pod_not_ready(p)} - {None}
        nodes: dict[str, dict[str, Any]] = {}
        for name in sorted(names):
            try:
                nodes[name] = self.client.call(
                    "GET", f"/api/v1/nodes/{name}", what=f"read Node {name}"
                )
            except (KubeApiError, ConfigError):
                continue
        return nodes

    def sleep_until_change(self, job_ids: list[str], timeout: float) -> None:
        """Plain sleep: the API offers no cheap wake-up for a handful of Jobs."""
        time.sleep(timeout)

    # ---- logs ---------------------------------------------------------------------------
    def _pod_name(self, job_id: str) -> str | None:
        pods = self.client.call(
            "GET", self.client.ns("pods"), query={"labelSelector": f"kinetic/job-id={job_id}"}
        )["items"]
        pods.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""))
        return pods[-1]["metadata"]["name"] if pods else None

    def _log(self, job_id: str, **query: Any) -> str:
        """The kinetic container's log (a pod may hold sidecars)."""
        query["container"] = KINETIC_CONTAINER
        pod = self._pod_name(job_id)
        if pod is None:
            return ""
        try:
            return str(
                self.client.call(
                    "GET",
                    self.client.ns("pods", pod) + "/log",
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
        for kind, path in (
            ("Job", self.client.ns("jobs", name)),
            ("Secret", self.client.ns("secrets", name)),
        ):
            try:
                self.client.call(
                    "DELETE",
                    path,
                    body={"propagationPolicy": "Foreground"},
                    what=f"delete {kind} {name}",
                )
            except KubeApiError as exc:
                if exc.status != 404:
                    raise

    delete = cancel
