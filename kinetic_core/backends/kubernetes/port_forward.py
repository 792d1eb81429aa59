"""Port-forward to a Kubernetes job's pod through the API server (``pods/portforward``), as
``kubectl port-forward`` does: TensorBoard, a profiler, a debug server in the job.

The local listener and relay are the core's (``kinetic_core.util.ports.Relay``); this module finds
the job's running pod (worker ``k`` of a multi-host job: the pod with that JobSet index) and
opens, per accepted connection, one port-forward stream with the official client
(``kubernetes.stream.portforward``: a websocket, subprotocol ``v4.channel.k8s.io``; the
API server proxies it to the kubelet's ``/portForward/{namespace}/{pod}``).

Permissions: the websocket upgrade is a GET, which RBAC authorizes as verb ``get`` on
``pods/portforward`` (servers that gate websocket upgrades on ``create``, and kubectl's
SPDY POST, need ``create``): checked once up front with a SelfSubjectAccessReview, so a
missing rule is a ``PermissionDenied`` before anything listens.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kinetic_core.backends.kubernetes.client import KubeClient, api_errors, permission_denied
from kinetic_core.errors import BackendError, ConfigError, JobNotRunning, PermissionDenied
from kinetic_core.util.ports import ForwardEnded, PortForward, PortSpec, Relay

log = logging.getLogger(__name__)

RESOURCE = "pods/portforward"
RULE_HINT = (
    'grant rule {apiGroups: [""], resources: ["pods/portforward"], verbs: ["get", "create"]} '
    "in a Role bound to these credentials (see docs/kubernetes.md, 'Permissions')"
)
_REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


def running_pod(pods: list[dict[str, Any]], job_id: str, worker: int | None) -> str:
    """The name of the job's (worker's) running pod, the newest if several; JobNotRunning
    naming what the pods are doing otherwise."""
    live = [
        p
        for p in pods
        if p.get("status", {}).get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")
    ]
    if live:
        live.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""))
        return str(live[-1]["metadata"]["name"])
    who = f"job {job_id}" + (f" worker {worker}" if worker is not None else "")
    phases = ", ".join(
        f"{p['metadata']['name']}: {p.get('status', {}).get('phase', '?')}" for p in pods
    )
    raise JobNotRunning(
        f"{who} has no running pod to forward to ({phases or 'no pod'}): a pending job's "
        "ports open once it runs (`kinetic jobs status` says when); a finished job has none."
    )


def _check_allowed(kube: KubeClient, pod: str) -> None:
    """PermissionDenied when RBAC will refuse the websocket upgrade (verb ``get``). A server
    that does not answer the review (or refuses it) is not checked: the upgrade will say."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "namespace": kube.namespace,
                "verb": "get",
                "resource": "pods",
                "subresource": "portforward",
                "name": pod,
            }
        },
    }
    try:
        answer = kube.call("POST", _REVIEWS, body=review, what="review pods/portforward")
    except (BackendError, ConfigError) as exc:
        log.debug("kinetic: cannot review pods/portforward permission: %s", exc)
        return
    if not answer.get("status", {}).get("allowed"):
        raise PermissionDenied(
            f"Kubernetes denies these credentials permission to port-forward to pod {pod} in "
            f"namespace {kube.namespace} (verb get on {RESOURCE}): {RULE_HINT}. The "
            "credentials are valid: refreshing the kubeconfig will not help.",
            verb="get",
            resource=RESOURCE,
            namespace=kube.namespace,
        )


class _Upstream:
    """One port-forward stream's local socket; on close, an error the kubelet sent on the
    port's error channel (nothing listens on that port in the pod...) is reported."""

    def __init__(self, forward: Any, remote: int, on_error: Callable[[str], None]) -> None:
        self._forward = forward
        self._remote = remote
        self._socket = forward.socket(remote)
        self._on_error = on_error

    def fileno(self) -> int:
        return int(self._socket.fileno())

    def recv(self, size: int) -> bytes:
        return bytes(self._socket.recv(size))

    def sendall(self, data: bytes) -> None:
        self._socket.sendall(data)

    def close(self) -> None:
        self._socket.close()
        error = self._forward.error(self._remote)
        if error:
            self._on_error(f"port {self._remote}: {error.strip()}")


class PodStreams:
    """Opens port-forward streams to one pod: a dedicated ApiClient (``stream.portforward``
    swaps its ``call_api`` while it runs, which must not race the backend's own requests),
    one stream at a time for the same reason."""

    def __init__(
        self, kube: KubeClient, pod: str, job_id: str, on_error: Callable[[str], None]
    ) -> None:
        from kubernetes import client

        self.kube = kube
        self.pod = pod
        self.job_id = job_id
        self.on_error = on_error
        self._api = client.ApiClient(configuration=kube.api.configuration)
        self._core = client.CoreV1Api(self._api)
        self._lock = threading.Lock()

    def connect(self, remote: int) -> _Upstream:
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream import portforward

        what = f"port-forward to pod {self.pod} port {remote}"
        with self._lock:
            try:
                with api_errors(what):
                    forward = portforward(
                        self._core.connect_get_namespaced_pod_portforward,
                        self.pod,
                        self.kube.namespace,
                        ports=str(remote),
                    )
            except BackendError as exc:
                cause = exc.__cause__
                if isinstance(cause, ApiException):
                    raise self._refused(cause, what) from None
                raise
        return _Upstream(forward, remote, self.on_error)

    def _refused(self, exc: Any, what: str) -> BackendError | ForwardEnded:
        """The handshake's HTTP answer (websocket-client's exception, the context of the
        client's ApiException) as kinetic's error; ForwardEnded when retrying cannot help."""
        bad = exc.__context__
        status = getattr(bad, "status_code", None)
        body = (getattr(bad, "resp_body", None) or b"").decode("utf-8", "replace")
        path = f"/api/v1/namespaces/{self.kube.namespace}/pods/{self.pod}/portforward"
        if status == 403:
            denied = permission_denied(body, "GET", path, self.kube.namespace)
            return ForwardEnded(f"{denied} ({RULE_HINT})")
        if status == 404:
            return ForwardEnded(
                f"pod {self.pod} of job {self.job_id} is gone (the job ended, or its pod was "
                "replaced): port-forward stopped; start it again once the job runs. The API "
                f"server said: {body.strip()[:300]}"
            )
        if status == 401:
            return ForwardEnded(
                f"Kubernetes rejected the credentials for {what} (HTTP 401): refresh them."
            )
        return BackendError(f"{what} failed: {exc.reason}", status=status, transient=True)

    def close(self) -> None:
        self._api.close()


class PodForward(Relay):
    """A Relay whose connections are port-forward streams to one pod."""

    def __init__(self, streams: PodStreams, ports: list[PortSpec]) -> None:
        self.streams = streams
        self.pod = streams.pod
        super().__init__(ports, streams.connect, on_error=streams.on_error)
        self.note = f"forwarding to pod {streams.pod} (namespace {streams.kube.namespace})"

    def close(self) -> None:
        super().close()
        self.streams.close()


def port_forward(
    kube: KubeClient,
    job_id: str,
    pods: list[dict[str, Any]],
    ports: list[PortSpec],
    worker: int | None = None,
    on_error: Callable[[str], None] = log.warning,
) -> PortForward:
    """Forward ``ports`` to the running one of the job's ``pods`` (of worker ``worker``)."""
    pod = running_pod(pods, job_id, worker)
    _check_allowed(kube, pod)
    return PodForward(PodStreams(kube, pod, job_id, on_error), ports)
