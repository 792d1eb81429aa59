"""A test "kubelet": registers fake nodes and runs their pods as local processes.

Why: the test cluster's control plane (apiserver, scheduler, controller-manager) is real, but
there is no container runtime on the machines the suite runs on. This agent plays the
kubelet's part of the contract with the API server closely enough for batch/v1 Jobs:

* registers Nodes (labels, taints, capacity) and keeps them Ready (node status heartbeat plus a
  Lease in kube-node-lease, which is what 1.20's node lifecycle controller watches);
* runs each pod bound to one of its nodes as a subprocess of the first container's
  command + args (the image is ignored, ``python``/``python3`` become ``sys.executable``) and
  reports Pending -> Running -> Succeeded/Failed through the pod status API, so the real Job
  controller completes or fails the Job;
* honours graceful deletion (SIGTERM to the process group, SIGKILL after the grace period, then
  the final delete with gracePeriodSeconds=0);
* simulates disruptions a test asks for with the pod annotation ``kinetic.test/disrupt``:
  ``reclaim`` (a spot VM reclaimed: graceful node shutdown, SIGTERM, SIGKILL after the pod's
  grace period capped at GKE's 15 s, pod ``Failed`` with reason ``Terminated`` as the 1.20
  kubelet sets it, no DisruptionTarget condition) or ``evict`` (SIGKILL at once, reason
  ``Evicted``, as the kubelet's eviction manager under node pressure);
* does what GKE does when a spot VM is reclaimed or the autoscaler removes a node, on
  request through its control endpoint (``delete-node``): graceful node shutdown of the
  node's pods, the Node object deleted, its pods garbage-collected as the pod GC does
  (see ``delete_node``);
* serves ``/containerLogs/{ns}/{pod}/{container}`` over HTTPS, so ``read_namespaced_pod_log``
  works through the API server (follow, tailLines, timestamps, sinceSeconds, limitBytes);
* serves the kubelet's websocket port-forward, ``/portForward/{ns}/{pod}?port=P``, which the
  API server's ``pods/portforward`` proxies to (``PortForwardStream``): each port a TCP
  connection to 127.0.0.1:P, since pods share this host's network (see README.md).

API access is plain REST over urllib3 (kubeconfig loaded with the kubernetes client): the
generated client's PATCH defaults to JSON-patch and its typed models would reformat the
timestamps a real kubelet sends, so raw JSON bodies keep this agent predictable.
Every pod's process runs in its own process group, whose id is also written to
``<state-dir>/pids/<pod-uid>`` so the cluster can kill leftovers if this agent itself dies.
Run: ``python node_agent.py --kubeconfig K --state-dir D --port P [--tls-cert C --tls-key K]``.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import hashlib
import json
import logging
import os
import re
import selectors
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

import urllib3
from kubernetes import client, config

log = logging.getLogger("node-agent")

HEARTBEAT_SECONDS = 10
FINAL_STATUS_ATTEMPTS = 60
LEASE_SECONDS = 40
NODE_IP = "127.0.0.1"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
_PYTHON = re.compile(r"^python(3(\.\d+)?)?$")
DISRUPT_ANNOTATION = "kinetic.test/disrupt"
SPOT_GRACE = 15  # seconds GKE gives a spot VM's pods before the node goes
# How long the pod GC stand-in waits for the Job controller to count a pod it failed.
JOB_COUNT_WAIT = 30.0
# What 1.26+ kubelets (graceful node shutdown) and the pod GC (a pod whose node no longer
# exists) add to a pod they stop: the DisruptionTarget condition, words as upstream's.
SHUTDOWN_MESSAGE = "Pod was terminated in response to imminent node shutdown."
BY_KUBELET = {"reason": "TerminationByKubelet", "message": SHUTDOWN_MESSAGE}
BY_POD_GC = {"reason": "DeletionByPodGC", "message": "PodGC: node no longer exists"}
DISRUPTIONS = {
    "reclaim": {"reason": "Terminated", "message": SHUTDOWN_MESSAGE},
    "evict": {"reason": "Evicted", "message": "The node was low on resource: memory."},
}
# What a container image provides: the interpreter and its packages. Nothing else of the
# agent's environment reaches a pod; everything else comes from the manifest.
IMAGE_ENV = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "TZ")
# Where a kubelet mounts the pod's service-account token (the ServiceAccount admission
# plugin adds that volume and mount to every pod unless automountServiceAccountToken: false).
SERVICE_ACCOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
# Runs the container's command in its own mount namespace with the token folder bound at
# SERVICE_ACCOUNT_PATH: "$0" is the folder, "$@" the command (pid and process group stay).
_MOUNT_SCRIPT = (
    f'mkdir -p {SERVICE_ACCOUNT_PATH} && mount --bind "$0" {SERVICE_ACCOUNT_PATH} && exec "$@"'
)
_VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)|\$\$")


IMAGES_FILE = "images.json"


def image_interpreter(state_dir: Path, image: str) -> str:
    """The interpreter an image provides, as a node's image cache would: ``images.json`` in
    the state dir maps an image reference to a Python executable (tests add entries to run
    a pod with other package versions); any other image is the agent's own interpreter."""
    try:
        table = json.loads((state_dir / IMAGES_FILE).read_text())
    except (OSError, ValueError):
        return sys.executable
    return str(table.get(image) or sys.executable)


@dataclass(frozen=True)
class NodeSpec:
    """What one fake node advertises."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    extra_capacity: dict[str, str] = field(default_factory=dict)
    taints: list[dict[str, str]] = field(default_factory=list)


SPOT_TAINT = {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}


def _slice_host(name: str, *, spot: bool) -> NodeSpec:
    """One host of a v5e 4x4 slice (machine type ct5lp-hightpu-4t, 4 chips), labelled and
    tainted as GKE labels and taints TPU (and spot) nodes."""
    return NodeSpec(
        name,
        labels={
            "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
            "cloud.google.com/gke-tpu-topology": "4x4",
            "cloud.google.com/gke-nodepool": "tpu-v5e-4x4-spot" if spot else "tpu-v5e-4x4",
            "node.kubernetes.io/instance-type": "ct5lp-hightpu-4t",
            **({"cloud.google.com/gke-spot": "true"} if spot else {}),
        },
        extra_capacity={"google.com/tpu": "4"},
        taints=[
            {"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"},
            *([SPOT_TAINT] if spot else []),
        ],
    )


DEFAULT_NODES: tuple[NodeSpec, ...] = (
    NodeSpec("node-cpu"),
    NodeSpec(
        "node-gpu",
        labels={"cloud.google.com/gke-accelerator": "nvidia-l4"},
        extra_capacity={"nvidia.com/gpu": "1"},
    ),
    NodeSpec(
        "node-tpu",
        labels={
            "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
            "cloud.google.com/gke-tpu-topology": "2x4",
        },
        extra_capacity={"google.com/tpu": "8"},
    ),
    NodeSpec(
        "node-spot",
        labels={"cloud.google.com/gke-spot": "true"},
        taints=[{"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}],
    ),
    NodeSpec(  # a spot TPU slice, as the nightly example's `train` asks for
        "node-tpu-spot",
        labels={
            "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
            "cloud.google.com/gke-tpu-topology": "2x4",
            "cloud.google.com/gke-spot": "true",
        },
        extra_capacity={"google.com/tpu": "8"},
        taints=[
            {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"},
            {"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"},
        ],
    ),
    # Two multi-host TPU slices: the 4 hosts of a v5e 4x4 node pool each (tpu-v5e-16);
    # the second is a spot node pool (the nightly example's `train` asks for spot).
    *(_slice_host(f"node-tpu-slice-{i}", spot=False) for i in range(4)),
    *(_slice_host(f"node-tpu-slice-spot-{i}", spot=True) for i in range(4)),
)


def now_rfc3339() -> str:
    """Second-precision RFC 3339 (metav1.Time)."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    """Microsecond RFC 3339 (metav1.MicroTime, used by Leases)."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_nano() -> str:
    """RFC 3339 with nanoseconds, as the kubelet prefixes log lines with timestamps=true."""
    ns = time.time_ns()
    base = dt.datetime.fromtimestamp(ns // 1_000_000_000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{base}.{ns % 1_000_000_000:09d}Z"


def parse_ts(stamp: str) -> float:
    """Inverse of `now_nano` (to the microsecond), for sinceSeconds/sinceTime filtering."""
    head, _, frac = stamp.rstrip("Z").partition(".")
    base = dt.datetime.strptime(head, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.UTC).timestamp()
    return base + (float(f"0.{frac}") if frac else 0.0)


class KubeError(Exception):
    """A non-2xx answer from the API server."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status


class MissingConfig(KubeError):
    """A Secret or ConfigMap a pod refers to does not exist (yet)."""

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(404, f'{kind} "{name}" not found')
        self.message = f'{kind} "{name}" not found'  # the kubelet's words


class Kube:
    """Minimal JSON REST client for the API server named by a kubeconfig."""

    def __init__(self, kubeconfig: str) -> None:
        cfg = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        self.host = cfg.host.rstrip("/")
        self.headers = {
            "Authorization": cfg.get_api_key_with_prefix("BearerToken", alias="authorization")
            or "",
            "User-Agent": "kinetic-node-agent",
            "Accept": "application/json",
        }
        self.http = urllib3.PoolManager(
            maxsize=32, cert_reqs="CERT_REQUIRED", ca_certs=cfg.ssl_ca_cert
        )

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
    ) -> dict[str, Any]:
        headers = dict(self.headers)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        resp = self.http.request(
            method, self.host + path, body=data, headers=headers, timeout=30.0, retries=False
        )
        if resp.status >= 300:
            raise KubeError(resp.status, resp.data.decode(errors="replace"))
        return json.loads(resp.data) if resp.data else {}

    def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("PATCH", path, body, "application/strategic-merge-patch+json")

    def watch(self, path: str, resource_version: str) -> Any:
        """Yield watch events (dicts) until the server ends the watch."""
        url = f"{self.host}{path}?watch=1&allowWatchBookmarks=true&timeoutSeconds=60"
        url += f"&resourceVersion={resource_version}"
        resp = self.http.request(
            "GET",
            url,
            headers=self.headers,
            preload_content=False,
            timeout=urllib3.Timeout(connect=10.0, read=90.0),
            retries=False,
        )
        try:
            if resp.status >= 300:
                raise KubeError(resp.status, resp.read().decode(errors="replace"))
            buf = b""
            for chunk in resp.stream(65536, decode_content=True):
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        finally:
            resp.release_conn()


@dataclass
class ContainerRun:
    """A container after a pod's first (a sidecar): its process, log and final state."""

    container: str
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    started_at: str = ""
    exit_code: int | None = None
    reason: str = ""
    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class PodRun:
    """A pod's local process and its log file."""

    namespace: str
    name: str
    uid: str
    container: str
    log_path: Path
    node: str = ""
    proc: subprocess.Popen[bytes] | None = None
    started_at: str = ""
    extras: list[ContainerRun] = field(default_factory=list)  # containers after the first
    done: threading.Event = field(default_factory=threading.Event)
    deleting: bool = False
    lost: bool = False  # its node was lost: the process died with nothing reported
    #: Pod-level reason/message of a simulated disruption, reported with the exit.
    disruption: dict[str, str] = field(default_factory=dict)
    #: Conditions a disruption adds to the final status (DisruptionTarget on 1.26+).
    disruption_conditions: list[dict[str, str]] = field(default_factory=list)


class Agent:
    """Registers the nodes, watches their pods and runs them."""

    def __init__(self, kube: Kube, nodes: tuple[NodeSpec, ...], state_dir: Path, port: int) -> None:
        self.nodes = {n.name: n for n in nodes}
        self.state_dir = state_dir
        self.port = port
        self.pid_dir = state_dir / "pids"
        self.log_dir = state_dir / "logs"
        self.pid_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.kube = kube
        self.runs: dict[str, PodRun] = {}  # by pod uid
        self.by_name: dict[tuple[str, str], PodRun] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        # Simulated faults (see CONTROL_ACTIONS): final status updates to fail, lost nodes.
        self.failing_status_updates = 0
        self.lost_nodes: set[str] = set()
        self.deleted_nodes: set[str] = set()  # Node objects deleted (a reclaimed spot VM)

    # ---- nodes ----------------------------------------------------------------------------

    def _node_status(self, spec: NodeSpec) -> dict[str, Any]:
        capacity = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}
        capacity.update(spec.extra_capacity)
        now = now_rfc3339()

        def cond(kind: str, status: str, reason: str) -> dict[str, str]:
            return {
                "type": kind,
                "status": status,
                "reason": reason,
                "message": reason,
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }

        return {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": [
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID"),
                cond("Ready", "True", "KubeletReady"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": NODE_IP},
                {"type": "Hostname", "address": spec.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}},
            "nodeInfo": {
                "machineID": spec.name,
                "systemUUID": spec.name,
                "bootID": spec.name,
                "kernelVersion": os.uname().release,
                "osImage": "kinetic test node agent",
                "containerRuntimeVersion": "local-process://1",
                "kubeletVersion": "v1.20.2",
                "kubeProxyVersion": "v1.20.2",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }

    def register_nodes(self) -> None:
        """Create (or re-create) each Node, then set its status and Lease."""
        for spec in self.nodes.values():
            self._register(spec)

    def _register(self, spec: NodeSpec) -> None:
        """Create (or re-create) one Node, then set its status and Lease."""
        labels = {
            "kubernetes.io/hostname": spec.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **spec.labels,
        }
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": spec.name, "labels": labels},
            "spec": {"taints": spec.taints} if spec.taints else {},
        }
        try:
            self.kube.request("POST", "/api/v1/nodes", body)
        except KubeError as exc:
            if exc.status != 409:
                raise
            self.kube.patch(f"/api/v1/nodes/{spec.name}", {"metadata": {"labels": labels}})
        self._patch_node_status(spec)
        self._renew_lease(spec.name)
        log.info("registered node %s", spec.name)

    def _patch_node_status(self, spec: NodeSpec) -> None:
        status = self._node_status(spec)
        self.kube.patch(f"/api/v1/nodes/{spec.name}/status", {"status": status})

    def _renew_lease(self, node: str) -> None:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": node, "namespace": "kube-node-lease"},
            "spec": {
                "holderIdentity": node,
                "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": now_micro(),
            },
        }
        path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        try:
            self.kube.patch(f"{path}/{node}", {"spec": body["spec"]})
        except KubeError as exc:
            if exc.status != 404:
                raise
            self.kube.request("POST", path, body)

    def heartbeat_loop(self) -> None:
        """Keep every node's Ready condition and Lease fresh so nothing gets evicted."""
        while not self.stopping.wait(HEARTBEAT_SECONDS):
            for spec in self.nodes.values():
                if spec.name in self.lost_nodes | self.deleted_nodes:
                    continue  # an unreachable (or deleted) node posts nothing
                try:
                    self._renew_lease(spec.name)
                    self._patch_node_status(spec)
                except Exception as exc:  # keep beating through transient errors
                    log.warning("heartbeat for %s failed: %s", spec.name, exc)

    # ---- pods -----------------------------------------------------------------------------

    def watch_pods(self) -> None:
        """List+watch all pods; react to the ones bound to our nodes."""
        while not self.stopping.is_set():
            try:
                listing = self.kube.request("GET", "/api/v1/pods")
                for pod in listing["items"]:
                    self.handle(pod)
                rv = listing["metadata"]["resourceVersion"]
                while not self.stopping.is_set():
                    for event in self.kube.watch("/api/v1/pods", rv):
                        if event["type"] == "ERROR":
                            raise KubeError(event["object"].get("code", 500), str(event))
                        rv = event["object"]["metadata"]["resourceVersion"]
                        if event["type"] in ("ADDED", "MODIFIED"):
                            self.handle(event["object"])
                        if self.stopping.is_set():
                            return
            except Exception as exc:
                if not self.stopping.is_set():
                    log.warning("pod watch re-listing after: %s", exc)
                    time.sleep(0.5)

    def handle(self, pod: dict[str, Any]) -> None:
        """Start, stop or finalize one pod according to its current state."""
        node = pod.get("spec", {}).get("nodeName")
        if node not in self.nodes or node in self.lost_nodes | self.deleted_nodes:
            return
        meta = pod["metadata"]
        uid = meta["uid"]
        with self.lock:
            run = self.runs.get(uid)
            if run is None and _orphaned(pod) and not meta.get("deletionTimestamp"):
                threading.Thread(target=self._reconcile, args=(pod,), daemon=True).start()
                return
            if meta.get("deletionTimestamp"):
                if run is None:
                    threading.Thread(target=self._finalize, args=(pod,), daemon=True).start()
                elif not run.deleting:
                    run.deleting = True
                    grace = meta.get("deletionGracePeriodSeconds")
                    threading.Thread(
                        target=self._kill_and_finalize, args=(run, pod, grace), daemon=True
                    ).start()
                return
            kind = (meta.get("annotations") or {}).get(DISRUPT_ANNOTATION)
            if run is not None and kind in DISRUPTIONS and not run.disruption:
                run.disruption = DISRUPTIONS[kind]
                grace = min(pod["spec"].get("terminationGracePeriodSeconds", 30), SPOT_GRACE)
                threading.Thread(
                    target=self._kill, args=(run, grace if kind == "reclaim" else 0), daemon=True
                ).start()
                return
            if run is not None or pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                return
            container = pod["spec"]["containers"][0]["name"]
            log_path = self.log_dir / f"{meta['namespace']}_{meta['name']}_{uid}" / "log"
            run = PodRun(meta["namespace"], meta["name"], uid, container, log_path, node)
            self.runs[uid] = run
            self.by_name[(run.namespace, run.name)] = run
        threading.Thread(target=self._run_pod, args=(run, pod), daemon=True).start()

    def _patch_status(self, run: PodRun, status: dict[str, Any]) -> None:
        status = self._with_extra_containers(run, status)
        try:
            path = f"/api/v1/namespaces/{run.namespace}/pods/{run.name}/status"
            self.kube.patch(path, {"status": status})
        except KubeError as exc:
            if exc.status not in (404, 409):
                raise

    def _conditions(self, ready: bool, reason: str = "") -> list[dict[str, Any]]:
        now = now_rfc3339()
        flag = "True" if ready else "False"
        extra = {"reason": reason} if reason else {}
        return [
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "Ready", "status": flag, "lastTransitionTime": now, **extra},
            {"type": "ContainersReady", "status": flag, "lastTransitionTime": now, **extra},
        ]

    def _container_status(self, run: PodRun, pod: dict[str, Any], state: dict[str, Any]) -> dict:
        return {
            "name": run.container,
            "image": pod["spec"]["containers"][0].get("image", ""),
            "imageID": "",
            "containerID": f"local://{run.proc.pid}" if run.proc else "",
            "ready": "running" in state,
            "started": "running" in state,
            "restartCount": 0,
            "state": state,
        }

    def _run_pod(self, run: PodRun, pod: dict[str, Any]) -> None:
        """Spawn the container's command and report its life cycle."""
        start = now_rfc3339()
        waiting = {"waiting": {"reason": "ContainerCreating"}}
        base = {"hostIP": NODE_IP, "startTime": start}
        try:
            self._patch_status(
                run,
                {
                    **base,
                    "phase": "Pending",
                    "conditions": self._conditions(False, "ContainersNotReady"),
                    "containerStatuses": [self._container_status(run, pod, waiting)],
                },
            )
            argv, env, cwd = self._command_when_ready(run, pod)
        except Exception as exc:
            log.warning("pod %s/%s cannot run: %s", run.namespace, run.name, exc)
            run.log_path.parent.mkdir(parents=True, exist_ok=True)
            run.log_path.write_text(f"{now_nano()} {exc}\n")
            run.started_at = start
            self._terminated(run, pod, 128, "ContainerCannotRun", str(exc))
            return
        run.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.lock:
            if run.deleting or self.stopping.is_set():
                run.done.set()
                return
            run.proc = subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            (self.pid_dir / run.uid).write_text(str(run.proc.pid))
            self._start_extra_containers(run, pod)
        run.started_at = now_rfc3339()
        log.info("pod %s/%s started pid %d: %s", run.namespace, run.name, run.proc.pid, argv)
        pump = threading.Thread(target=self._pump, args=(run,), daemon=True)
        pump.start()
        self._patch_status(
            run,
            {
                **base,
                "phase": "Running",
                "podIP": NODE_IP,
                "podIPs": [{"ip": NODE_IP}],
                "conditions": self._conditions(True),
                "containerStatuses": [
                    self._container_status(run, pod, {"running": {"startedAt": run.started_at}})
                ],
            },
        )
        code = run.proc.wait()
        pump.join()
        self._wait_extra_containers(run, pod, code)
        if cwd and cwd.startswith(str(self.state_dir / "pods")):
            shutil.rmtree(cwd, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            (self.pid_dir / run.uid).unlink()
        code = 128 - code if code < 0 else code  # killed by signal N -> 128+N
        log.info("pod %s/%s exited %d", run.namespace, run.name, code)
        self._terminated(run, pod, code, "Completed" if code == 0 else "Error", "")

    def _command_when_ready(
        self, run: PodRun, pod: dict[str, Any]
    ) -> tuple[list[str], dict[str, str], str | None]:
        """``_command``, waiting as the kubelet does for a referenced Secret or ConfigMap that
        does not exist: for ever (until the pod is deleted), the container waiting with
        reason CreateContainerConfigError and the kubelet's message (``secret "x" not found``)."""
        reported = ""
        while True:
            try:
                return self._command(pod)
            except MissingConfig as exc:
                if run.deleting:
                    raise
                if exc.message != reported:
                    reported = exc.message
                    log.info("pod %s/%s waits for its config: %s", run.namespace, run.name, exc)
                    waiting = {
                        "waiting": {"reason": "CreateContainerConfigError", "message": exc.message}
                    }
                    self._patch_status(
                        run, {"containerStatuses": [self._container_status(run, pod, waiting)]}
                    )
                if self.stopping.wait(0.5):
                    raise

    def _terminated(
        self, run: PodRun, pod: dict[str, Any], code: int, reason: str, message: str
    ) -> None:
        state = {
            "terminated": {
                "exitCode": code,
                "reason": reason,
                "startedAt": run.started_at,
                "finishedAt": now_rfc3339(),
                **({"message": message} if message else {}),
                **({"containerID": f"local://{run.proc.pid}"} if run.proc else {}),
            }
        }
        try:
            if run.lost:
                return  # its node is unreachable: nothing gets reported
            final = {
                "phase": "Succeeded" if code == 0 and not run.disruption else "Failed",
                **run.disruption,
                "conditions": [
                    *self._conditions(False, "PodCompleted"),
                    *run.disruption_conditions,
                ],
                "containerStatuses": [self._container_status(run, pod, state)],
            }
            self._report_final(run, final)
        finally:
            run.done.set()

    def _report_final(self, run: PodRun, final: dict[str, Any]) -> None:
        """The final status, retried until the API server takes it (or the pod is gone):
        a lost final update would leave the pod Running forever."""
        delay = 0.2
        for attempt in range(FINAL_STATUS_ATTEMPTS):
            try:
                with self.lock:
                    inject = self.failing_status_updates > 0
                    self.failing_status_updates -= inject
                if inject:
                    raise KubeError(503, "injected failure of the final status update")
                self._patch_status(run, final)
                return
            except Exception as exc:
                log.warning(
                    "final status of %s/%s not taken (attempt %d), retrying: %s",
                    run.namespace,
                    run.name,
                    attempt + 1,
                    exc,
                )
                if self.stopping.wait(delay):
                    return
                delay = min(delay * 2, 5.0)
        log.error("final status of %s/%s never taken", run.namespace, run.name)

    def _reconcile(self, pod: dict[str, Any]) -> None:
        """A pod a previous agent started: its process (orphaned, or gone) cannot be
        followed any more, so kill what is left and report the container terminated, as a
        kubelet does for a container it finds dead after a restart."""
        meta = pod["metadata"]
        pid_file = self.pid_dir / meta["uid"]
        with contextlib.suppress(ValueError, OSError):
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)
        with contextlib.suppress(OSError):
            pid_file.unlink()
        container = pod["spec"]["containers"][0]["name"]
        log_path = self.log_dir / f"{meta['namespace']}_{meta['name']}_{meta['uid']}" / "log"
        run = PodRun(meta["namespace"], meta["name"], meta["uid"], container, log_path)
        run.started_at = (pod.get("status") or {}).get("startTime") or now_rfc3339()
        log.info(
            "pod %s/%s was started by a previous agent: reporting it lost", run.namespace, run.name
        )
        self._terminated(
            run, pod, 137, "Error", "the node agent restarted and lost the container's process"
        )

    def _pump(self, run: PodRun) -> None:
        """Copy the process output to the log file, each line prefixed with its timestamp."""
        assert run.proc is not None and run.proc.stdout is not None
        with run.log_path.open("ab", buffering=0) as out:
            for line in iter(run.proc.stdout.readline, b""):
                out.write(now_nano().encode() + b" " + line)

    def _command(
        self, pod: dict[str, Any], container: dict[str, Any] | None = None
    ) -> tuple[list[str], dict[str, str], str | None]:
        container = container or pod["spec"]["containers"][0]
        env = {k: os.environ[k] for k in IMAGE_ENV if k in os.environ}
        env.update(self._service_env())
        for item in container.get("envFrom") or []:
            env.update(self._env_from(pod["metadata"]["namespace"], item))
        for item in container.get("env") or []:
            env[item["name"]] = self._env_value(pod, item, env)
        argv = [*(container.get("command") or []), *(container.get("args") or [])]
        if not argv:
            raise ValueError("container has no command/args (images are not run)")
        argv = [_VAR_REF.sub(lambda m: _expand(m, env), a) for a in argv]
        argv = self._with_mounts(pod, container, env, argv)
        if _PYTHON.match(os.path.basename(argv[0])):
            argv[0] = image_interpreter(self.state_dir, container.get("image", ""))
        token = json.loads(env.get("NODE_AGENT_MOUNTS", "{}")).get(SERVICE_ACCOUNT_PATH)
        if token is not None:
            argv = _in_mount_namespace(token, argv)
        cwd = container.get("workingDir") or None
        if cwd and not os.path.isdir(cwd):
            raise ValueError(f"workingDir {cwd!r} does not exist on this machine")
        if cwd is None:  # a fresh folder, as a container's own filesystem: no shared disk
            cwd = str(self.state_dir / "pods" / pod["metadata"]["uid"])
            os.makedirs(cwd, exist_ok=True)
            env["HOME"] = cwd
        return argv, env, cwd

    def _service_env(self) -> dict[str, str]:
        """What a kubelet gives every pod: the API server's ``kubernetes`` Service (here the
        API server itself on 127.0.0.1), the way in-cluster clients find it."""
        port = str(urlparse(self.kube.host).port or 443)
        return {
            "KUBERNETES_SERVICE_HOST": NODE_IP,
            "KUBERNETES_SERVICE_PORT": port,
            "KUBERNETES_SERVICE_PORT_HTTPS": port,
            "KUBERNETES_PORT": f"tcp://{NODE_IP}:{port}",
            "KUBERNETES_PORT_443_TCP": f"tcp://{NODE_IP}:{port}",
            "KUBERNETES_PORT_443_TCP_PROTO": "tcp",
            "KUBERNETES_PORT_443_TCP_ADDR": NODE_IP,
            "KUBERNETES_PORT_443_TCP_PORT": port,
        }

    def _env_from(self, namespace: str, item: dict[str, Any]) -> dict[str, str]:
        prefix = item.get("prefix", "")
        if "secretRef" in item:
            secret = self._read(namespace, "secrets", item["secretRef"]["name"])
            data = {k: base64.b64decode(v).decode() for k, v in secret.items()}
        else:
            data = self._read(namespace, "configmaps", item["configMapRef"]["name"])
        return {prefix + k: v for k, v in data.items()}

    def _env_value(self, pod: dict[str, Any], item: dict[str, Any], env: dict[str, str]) -> str:
        if "value" in item or "valueFrom" not in item:
            return _VAR_REF.sub(lambda m: _expand(m, env), item.get("value", ""))
        ns = pod["metadata"]["namespace"]
        source = item["valueFrom"]
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            return base64.b64decode(self._read(ns, "secrets", ref["name"])[ref["key"]]).decode()
        if "configMapKeyRef" in source:
            ref = source["configMapKeyRef"]
            return self._read(ns, "configmaps", ref["name"])[ref["key"]]
        if "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            fields = {
                "metadata.name": pod["metadata"]["name"],
                "metadata.namespace": ns,
                "metadata.uid": pod["metadata"]["uid"],
                "spec.nodeName": pod["spec"]["nodeName"],
                "spec.serviceAccountName": pod["spec"].get("serviceAccountName", ""),
                "status.podIP": NODE_IP,
                "status.hostIP": NODE_IP,
            }
            match = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
            if match:
                return (pod["metadata"].get(match[1]) or {}).get(match[2], "")
            return fields[path]
        raise ValueError(f"unsupported env source for {item['name']}: {source}")

    def _read(self, namespace: str, kind: str, name: str) -> dict[str, str]:
        """The `data` of a Secret or ConfigMap (MissingConfig when it does not exist)."""
        try:
            obj = self.kube.request("GET", f"/api/v1/namespaces/{namespace}/{kind}/{name}")
        except KubeError as exc:
            if exc.status == 404:
                raise MissingConfig(kind.rstrip("s").lower(), name) from None
            raise
        return dict(obj.get("data") or {})

    def _kill_and_finalize(self, run: PodRun, pod: dict[str, Any], grace: int | None) -> None:
        """Graceful deletion: SIGTERM, SIGKILL after the grace period, then the final delete."""
        self._kill(run, 30 if grace is None else grace)
        run.done.wait(10)
        self._finalize(pod)

    def _kill(self, run: PodRun, grace: float) -> None:
        self._kill_extra_containers(run, grace)
        proc = run.proc
        if proc is None or proc.poll() is not None:
            return
        log.info("pod %s/%s: SIGTERM pid %d", run.namespace, run.name, proc.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(grace, 0))
        # The leader may be gone while children of its group live on: always sweep the group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()

    def _finalize(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        options = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
        try:
            path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
            self.kube.request("DELETE", path, options)
            log.info("pod %s/%s finalized", meta["namespace"], meta["name"])
        except KubeError as exc:
            if exc.status not in (404, 409):
                log.warning("final delete of %s failed: %s", meta["name"], exc)
        shutil.rmtree(self.state_dir / "volumes" / meta["uid"], ignore_errors=True)
        with self.lock:
            run = self.runs.pop(meta["uid"], None)
            if run is not None and self.by_name.get((run.namespace, run.name)) is run:
                del self.by_name[(run.namespace, run.name)]

    # ---- simulated faults -----------------------------------------------------------------

    def lose_node(self, node: str) -> str:
        """What the control plane sees when a node dies: no heartbeat, no pod updates, and
        (as the node lifecycle controller sets them) Ready=Unknown, the unreachable taint and
        its pods Ready=False. The pods' processes die with the node."""
        if node not in self.nodes:
            raise ValueError(f"unknown node {node}")
        with self.lock:
            self.lost_nodes.add(node)
            runs = [r for r in self.runs.values() if r.node == node]
            for run in runs:
                run.lost = True
        for run in runs:
            self._kill(run, 0)
        now = now_rfc3339()
        status = self._node_status(self.nodes[node])
        for cond in status["conditions"]:
            cond.update(
                status="Unknown",
                reason="NodeStatusUnknown",
                message="Kubelet stopped posting node status.",
                lastTransitionTime=now,
            )
        self.kube.patch(f"/api/v1/nodes/{node}/status", {"status": status})
        unreachable = {"key": UNREACHABLE_TAINT, "effect": "NoExecute", "timeAdded": now}
        self.kube.patch(
            f"/api/v1/nodes/{node}", {"spec": {"taints": [*self.nodes[node].taints, unreachable]}}
        )
        not_ready = {"type": "Ready", "status": "False", "lastTransitionTime": now}
        for run in runs:
            with contextlib.suppress(KubeError):
                self._patch_status(run, {"conditions": [not_ready]})
        return "ok"

    def delete_node(self, node: str, grace: str = str(SPOT_GRACE), condition: str = "1") -> str:
        """What GKE does when it reclaims a spot VM (or the autoscaler removes a node),
        step by step, each step as the upstream component does it:

        1. graceful node shutdown (the kubelet): each pod's processes get SIGTERM, SIGKILL
           after ``grace`` seconds (GKE gives non-system pods 15 s of the VM's 30 s notice),
           and the pod is reported ``Failed`` with reason ``Terminated`` and the kubelet's
           message; with ``condition`` also the ``DisruptionTarget`` condition (reason
           ``TerminationByKubelet``), as 1.26+ kubelets add it. Pods of a lost node
           (``lose-node``) are skipped: their processes died with it, nothing reported.
        2. the Node object is deleted (the cloud node lifecycle controller, or the
           cluster autoscaler removing the node);
        3. the pod GC: every pod still bound to the node is patched ``Failed`` (with
           ``condition``: ``DisruptionTarget`` reason ``DeletionByPodGC``) unless it is
           terminal already, then force-deleted (grace 0), as 1.26+'s
           ``gcOrphaned``/``markFailedAndDeletePodWithCondition`` does. Deterministic where
           upstream is not: at once instead of after the 40 s quarantine and the 20 s GC
           period, and only once the Job controller has counted the pod failed (1.20's
           Job controller, which has no tracking finalizers, would otherwise replace a pod
           that vanished; 1.26+'s counts a removed pod as failed by itself)."""
        if node not in self.nodes:
            raise ValueError(f"unknown node {node}")
        disruption_target = condition.lower() in ("1", "true", "yes")
        self._shut_down_pods(node, float(grace), disruption_target)
        with self.lock:
            self.deleted_nodes.add(node)
        try:
            self.kube.request("DELETE", f"/api/v1/nodes/{node}")
        except KubeError as exc:
            if exc.status != 404:
                raise
        log.info("node %s deleted", node)
        pods = self.kube.request("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node}")
        for pod in pods["items"]:
            self._gc_orphan(pod, disruption_target)
        with self.lock:  # their processes are gone; a re-registered node starts afresh
            for run in [r for r in self.runs.values() if r.node == node]:
                del self.runs[run.uid]
                if self.by_name.get((run.namespace, run.name)) is run:
                    del self.by_name[(run.namespace, run.name)]
        return "ok"

    def _shut_down_pods(self, node: str, grace: float, disruption_target: bool) -> None:
        """The kubelet's graceful node shutdown of every pod it runs on ``node``."""
        with self.lock:
            runs = [r for r in self.runs.values() if r.node == node and not r.lost]
            for run in runs:
                run.disruption = DISRUPTIONS["reclaim"]
                if disruption_target:
                    run.disruption_conditions = [_disruption_target(BY_KUBELET)]
        threads = [threading.Thread(target=self._kill, args=(r, grace)) for r in runs]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for run in runs:  # the final status is reported
            if run.proc is not None:
                run.done.wait(FINAL_STATUS_ATTEMPTS)

    def _gc_orphan(self, pod: dict[str, Any], disruption_target: bool) -> None:
        """The pod GC's handling of a pod whose node no longer exists (see delete_node)."""
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        if pod.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
            status: dict[str, Any] = {"phase": "Failed"}
            if disruption_target:
                status["conditions"] = [_disruption_target(BY_POD_GC)]
            with contextlib.suppress(KubeError):
                self.kube.patch(f"{path}/status", {"status": status})
        self._wait_counted(pod)
        options = {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}}
        try:
            self.kube.request("DELETE", path, options)
            log.info("pod %s/%s garbage-collected with its node", meta["namespace"], meta["name"])
        except KubeError as exc:
            if exc.status not in (404, 409):
                raise

    def _wait_counted(self, pod: dict[str, Any]) -> None:
        """Until the pod's Job has counted a failed pod or ended (or is gone)."""
        owners = [o for o in pod["metadata"].get("ownerReferences") or [] if o["kind"] == "Job"]
        if not owners:
            return
        path = f"/apis/batch/v1/namespaces/{pod['metadata']['namespace']}/jobs/{owners[0]['name']}"
        deadline = time.monotonic() + JOB_COUNT_WAIT
        while time.monotonic() < deadline:
            try:
                status = self.kube.request("GET", path).get("status", {})
            except KubeError as exc:
                if exc.status == 404:
                    return
                raise
            ended = any(
                c.get("type") in ("Failed", "Complete") and c.get("status") == "True"
                for c in status.get("conditions") or []
            )
            if ended or status.get("failed"):
                return
            time.sleep(0.2)
        log.warning("job %s never counted pod %s failed", path, pod["metadata"]["name"])

    def restore_node(self, node: str) -> str:
        """The node is back (a lost node reachable again, or a deleted one replaced by the
        autoscaler under the same name): heartbeats resume, the taint goes, its pods are
        handled again."""
        spec = self.nodes[node]
        with self.lock:
            deleted = node in self.deleted_nodes
            self.deleted_nodes.discard(node)
        if deleted:
            self._register(spec)
        self.kube.patch(f"/api/v1/nodes/{node}", {"spec": {"taints": spec.taints or None}})
        with self.lock:
            self.lost_nodes.discard(node)
            for run in [r for r in self.runs.values() if r.lost and r.node == node]:
                del self.runs[run.uid]  # their processes died with the node: reconciled below
        self._patch_node_status(spec)
        self._renew_lease(node)
        for pod in self.kube.request("GET", "/api/v1/pods")["items"]:
            if pod.get("spec", {}).get("nodeName") == node:
                self.handle(pod)
        return "ok"

    # ---- more containers and volumes -------------------------------------------------------

    def _start_extra_containers(self, run: PodRun, pod: dict[str, Any]) -> None:
        """Start every container after the first, each in its own process group."""
        for spec in pod["spec"]["containers"][1:]:
            extra = ContainerRun(spec["name"], run.log_path.with_name(f"log.{spec['name']}"))
            run.extras.append(extra)
            extra.started_at = now_rfc3339()
            try:
                argv, env, cwd = self._command(pod, spec)
                extra.proc = subprocess.Popen(
                    argv,
                    env=env,
                    cwd=cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except Exception as exc:
                log.warning("pod %s/%s container %s cannot run: %s", run.name, run.uid, spec, exc)
                extra.log_path.write_text(f"{now_nano()} {exc}\n")
                extra.exit_code, extra.reason = 128, "ContainerCannotRun"
                extra.done.set()
                continue
            (self.pid_dir / f"{run.uid}.{extra.container}").write_text(str(extra.proc.pid))
            threading.Thread(target=self._follow_extra, args=(run, extra), daemon=True).start()

    def _follow_extra(self, run: PodRun, extra: ContainerRun) -> None:
        assert extra.proc is not None
        self._pump(extra)  # type: ignore[arg-type]  # same fields as a PodRun's
        code = extra.proc.wait()
        extra.exit_code = 128 - code if code < 0 else code
        extra.reason = "Completed" if extra.exit_code == 0 else "Error"
        with contextlib.suppress(FileNotFoundError):
            (self.pid_dir / f"{run.uid}.{extra.container}").unlink()
        extra.done.set()

    def _wait_extra_containers(self, run: PodRun, pod: dict[str, Any], code: int) -> None:
        """The first container ended: while others run the pod stays Running (as on a
        real node, where a sidecar that never ends keeps the Job from completing)."""
        if all(e.done.is_set() for e in run.extras):
            return
        state = {
            "terminated": {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": run.started_at,
                "finishedAt": now_rfc3339(),
            }
        }
        with contextlib.suppress(KubeError):
            status = {
                "phase": "Running",
                "containerStatuses": [self._container_status(run, pod, state)],
            }
            self._patch_status(run, status)
        for extra in run.extras:
            extra.done.wait()

    def _with_extra_containers(self, run: PodRun, status: dict[str, Any]) -> dict[str, Any]:
        """``status`` with the other containers' statuses added, and a final phase that
        counts their exit codes (Failed if any failed)."""
        if not run.extras or "containerStatuses" not in status:
            return status
        statuses = list(status["containerStatuses"])
        for extra in run.extras:
            if extra.done.is_set():
                state: dict[str, Any] = {
                    "terminated": {
                        "exitCode": extra.exit_code,
                        "reason": extra.reason,
                        "startedAt": extra.started_at,
                        "finishedAt": now_rfc3339(),
                    }
                }
            elif extra.proc is not None:
                state = {"running": {"startedAt": extra.started_at}}
            else:
                state = {"waiting": {"reason": "ContainerCreating"}}
            statuses.append(
                {
                    "name": extra.container,
                    "image": "",
                    "imageID": "",
                    "containerID": f"local://{extra.proc.pid}" if extra.proc else "",
                    "ready": "running" in state,
                    "started": "running" in state,
                    "restartCount": 0,
                    "state": state,
                }
            )
        failed = any(e.done.is_set() and e.exit_code for e in run.extras)
        phase = "Failed" if status.get("phase") == "Succeeded" and failed else status.get("phase")
        return {**status, "containerStatuses": statuses, **({"phase": phase} if phase else {})}

    def _kill_extra_containers(self, run: PodRun, grace: float) -> None:
        alive = [e.proc for e in run.extras if e.proc is not None and e.proc.poll() is None]
        for proc in alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in alive:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(grace, 0))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)

    def _volume_dirs(self, pod: dict[str, Any]) -> dict[str, str]:
        """Each pod volume as a local folder: emptyDir (and medium Memory) a per-pod folder,
        hostPath itself, a Secret's or ConfigMap's keys as files, a PVC a per-claim folder."""
        ns, uid = pod["metadata"]["namespace"], pod["metadata"]["uid"]
        root = self.state_dir / "volumes" / uid
        folders: dict[str, str] = {}
        for volume in pod["spec"].get("volumes") or []:
            name = volume["name"]
            if "hostPath" in volume:
                folders[name] = volume["hostPath"]["path"]
                continue
            if "persistentVolumeClaim" in volume:  # outlives the pod, shared by claim name
                claim = volume["persistentVolumeClaim"]["claimName"]
                folder = self.state_dir / "claims" / ns / claim
            else:
                folder = root / name
            folder.mkdir(parents=True, exist_ok=True)
            files: dict[str, bytes] = {}
            if "secret" in volume:
                data = self._read(ns, "secrets", volume["secret"]["secretName"])
                files = {k: base64.b64decode(v) for k, v in data.items()}
            elif "configMap" in volume:
                data = self._read(ns, "configmaps", volume["configMap"]["name"])
                files = {k: v.encode() for k, v in data.items()}
            for key, content in files.items():
                (folder / key).write_bytes(content)
            folders[name] = str(folder)
        return folders

    def _with_mounts(
        self, pod: dict[str, Any], container: dict[str, Any], env: dict[str, str], argv: list[str]
    ) -> list[str]:
        """Map the container's mount paths to local folders: exposed in NODE_AGENT_MOUNTS
        ({mountPath: folder}) and rewritten where an env value or argument starts with one."""
        mounts = container.get("volumeMounts") or []
        if not mounts:
            return argv
        folders = self._volume_dirs(pod)
        mapping = {
            m["mountPath"]: os.path.join(folders[m["name"]], m.get("subPath", "")) for m in mounts
        }
        env["NODE_AGENT_MOUNTS"] = json.dumps(mapping)
        for key, value in list(env.items()):
            env[key] = _rewrite_path(value, mapping)
        return [_rewrite_path(a, mapping) for a in argv]

    def shutdown(self) -> None:
        """Kill every pod process (process groups), so nothing outlives the agent."""
        self.stopping.set()
        # Bounded: a signal handler may interrupt a thread that holds the lock.
        locked = self.lock.acquire(timeout=1)
        runs = list(self.runs.values())
        if locked:
            self.lock.release()
        threads = [threading.Thread(target=self._kill, args=(r, 2)) for r in runs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def _in_mount_namespace(token_dir: str, argv: list[str]) -> list[str]:
    """``argv`` run in a mount namespace of its own where the service-account token folder
    is bound at SERVICE_ACCOUNT_PATH, as in a container (the agent runs as root). Without
    root (no mount possible) the command runs as is and reads no token there."""
    if os.geteuid() != 0:
        log.warning(
            "not root: the service-account token is not mounted at %s", SERVICE_ACCOUNT_PATH
        )
        return argv
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        _MOUNT_SCRIPT,
        token_dir,
        *argv,
    ]


def _disruption_target(why: dict[str, str]) -> dict[str, str]:
    """The pod condition 1.26+ components add to a pod they stop from outside."""
    return {
        "type": "DisruptionTarget",
        "status": "True",
        "lastTransitionTime": now_rfc3339(),
        **why,
    }


def _orphaned(pod: dict[str, Any]) -> bool:
    """Started (it has a startTime, which this agent sets first) and not finished: a pod of
    a previous agent's when this agent has no run for it."""
    status = pod.get("status") or {}
    return bool(status.get("startTime")) and status.get("phase") not in ("Succeeded", "Failed")


def _fail_status_updates(agent: Agent, count: str = "1") -> str:
    with agent.lock:
        agent.failing_status_updates = int(count)
    return "ok"


CONTROL_ACTIONS: dict[str, Any] = {
    # the next N final pod status updates fail (a lost update the agent must retry)
    "fail-status-updates": _fail_status_updates,
    # node unreachable: heartbeats stop, its pods' processes die unreported, Ready=Unknown
    "lose-node": lambda agent, node: agent.lose_node(node),
    "restore-node": lambda agent, node: agent.restore_node(node),
    # a spot VM reclaimed / a node removed: graceful shutdown, Node deleted, pods GC'd
    "delete-node": lambda agent, **params: agent.delete_node(**params),
}


def _rewrite_path(value: str, mapping: dict[str, str]) -> str:
    """``value`` with a leading mount path replaced by its local folder."""
    for mount, folder in sorted(mapping.items(), key=lambda kv: -len(kv[0])):
        if value == mount or value.startswith(mount.rstrip("/") + "/"):
            return folder.rstrip("/") + value[len(mount.rstrip("/")) :]
    return value


def _container_run(run: PodRun | None, container: str) -> PodRun | ContainerRun | None:
    """The run serving ``container``'s log: the pod's first container or another one."""
    if run is None:
        return None
    return next((e for e in run.extras if e.container == container), run)


def _expand(match: re.Match[str], env: dict[str, str]) -> str:
    """Kubernetes $(VAR) expansion: known vars expand, unknown stay literal, $$ -> $."""
    if match[0] == "$$":
        return "$"
    return env.get(match[1], match[0])


# ---- kubelet HTTPS endpoint: container logs ----------------------------------------------


class LogHandler(BaseHTTPRequestHandler):
    """Serves GET /containerLogs/{namespace}/{pod}/{container} like the kubelet."""

    agent: Agent
    # Unbuffered reads: after a websocket upgrade the frames are read from the socket
    # itself, so no byte may wait in a reader's buffer (headers are read byte by byte).
    rbufsize = 0

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("kubelet http: " + format, *args)

    def _error(self, code: int, message: str) -> None:
        body = message.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        url = urlparse(self.path)
        parts = [unquote(p) for p in url.path.strip("/").split("/")]
        if parts in (["healthz"], ["pods"]):
            return self._error(200, "ok")
        if len(parts) == 2 and parts[0] == "kinetic":
            return self._control(parts[1], {k: v[-1] for k, v in parse_qs(url.query).items()})
        if len(parts) in (3, 4) and parts[0] == "portForward":  # .../{pod}[/{uid}]
            return self._port_forward(parts[1], parts[2], parse_qs(url.query).get("port", []))
        if len(parts) != 4 or parts[0] != "containerLogs":
            return self._error(404, f"not found: {url.path}")
        _, namespace, pod, container = parts
        run = _container_run(self.agent.by_name.get((namespace, pod)), container)
        if run is None or run.container != container or not run.log_path.exists():
            if run is not None and run.container != container:
                return self._error(400, f"container {container} is not run by the test agent")
            return self._error(400, f'container "{container}" in pod "{pod}" is waiting to start')
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Connection", "close")
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self._stream(run, query)

    def _port_forward(self, namespace: str, pod: str, ports: list[str]) -> None:
        """The kubelet's websocket port-forward (``server/portforward/websocket.go``): check
        the pod and ports, answer the upgrade with the first offered subprotocol we speak,
        then relay (``PortForwardStream``)."""
        run = self.agent.by_name.get((namespace, pod))
        if run is None:
            return self._error(404, f"pod {namespace}/{pod} not found")
        numbers = [int(p) for p in ports if p.isdigit() and 0 < int(p) < 65536]
        if not ports or len(numbers) != len(ports):
            return self._error(400, f"invalid or missing port parameter(s): {ports}")
        if self.headers.get("Upgrade", "").lower() != "websocket":
            return self._error(400, "only websocket port-forward is served (not SPDY)")
        offered = [p.strip() for p in self.headers.get("Sec-WebSocket-Protocol", "").split(",")]
        protocol = next((p for p in offered if p in PORT_FORWARD_PROTOCOLS), None)
        if protocol is None:
            return self._error(400, f"none of the subprotocols {offered} is served")
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1((key + WEBSOCKET_GUID).encode()).digest())
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept.decode())
        if protocol:
            self.send_header("Sec-WebSocket-Protocol", protocol)
        self.end_headers()
        self.close_connection = True
        log.info("port-forward to pod %s/%s ports %s (%s)", namespace, pod, numbers, protocol)
        with contextlib.suppress(OSError, ssl.SSLError):
            PortForwardStream(self.connection, numbers, run.uid).run()

    def _control(self, action: str, params: dict[str, str]) -> None:
        """Test-only fault injection on 127.0.0.1 (see CONTROL_ACTIONS)."""
        handler = CONTROL_ACTIONS.get(action)
        if handler is None:
            return self._error(404, f"unknown action {action}; known: {sorted(CONTROL_ACTIONS)}")
        try:
            return self._error(200, handler(self.agent, **params))
        except Exception as exc:
            return self._error(400, f"{action} failed: {exc}")

    def _stream(self, run: PodRun, query: dict[str, str]) -> None:
        follow = query.get("follow") == "true"
        timestamps = query.get("timestamps") == "true"
        tail = int(query["tailLines"]) if "tailLines" in query else None
        limit = int(query["limitBytes"]) if "limitBytes" in query else None
        since: float | None = None
        if "sinceSeconds" in query:
            since = time.time() - int(query["sinceSeconds"])
        elif "sinceTime" in query:
            since = dt.datetime.fromisoformat(query["sinceTime"].replace("Z", "+00:00")).timestamp()
        sent = 0

        def emit(lines: list[bytes]) -> bool:
            nonlocal sent
            for raw in lines:
                stamp, _, text = raw.partition(b" ")
                if since is not None and parse_ts(stamp.decode()) < since:
                    continue
                data = raw if timestamps else text
                if limit is not None:
                    data = data[: limit - sent]
                self.wfile.write(data)
                sent += len(data)
                if limit is not None and sent >= limit:
                    return False
            self.wfile.flush()
            return True

        with run.log_path.open("rb") as src:
            lines = src.readlines()
            pending = b""
            if lines and not lines[-1].endswith(b"\n"):
                pending = lines.pop()  # a line still being written
            if tail is not None:
                lines = lines[-tail:] if tail > 0 else []
            if not emit(lines) or not follow:
                if not follow and pending:
                    emit([pending])
                return
            while True:
                chunk = src.readline()
                if chunk:
                    pending += chunk
                    if pending.endswith(b"\n"):
                        if not emit([pending]):
                            return
                        pending = b""
                elif run.done.is_set():  # process gone and its output fully written
                    if pending:
                        emit([pending])
                    return
                else:
                    time.sleep(0.05)


# ---- kubelet HTTPS endpoint: port-forward (websocket) -------------------------------------

WEBSOCKET_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455, section 1.3
# The kubelet's binary port-forward subprotocols ("" when the client names none); the
# base64 variant (v4.base64.channel.k8s.io) is not served.
PORT_FORWARD_PROTOCOLS = ("v4.channel.k8s.io", "")
BINARY, CLOSE, PING, PONG = 0x2, 0x8, 0x9, 0xA


class PortForwardStream:
    """One port-forward websocket after the upgrade, as the kubelet speaks it: port i has
    data channel 2i and error channel 2i+1; the first frame on each carries the port
    (2 bytes, little-endian); each frame's first byte is its channel. Each port is a TCP
    connection to 127.0.0.1:port (pods share this host's network); a port nobody listens
    on gets the kubelet's kind of message on its error channel. The websocket closes once
    every port's connection has ended (or at the client's close frame).

    One thread, readiness from a selector and the TLS layer's ``pending()`` (bytes already
    decrypted): an SSL socket must not be read and written from two threads at once."""

    def __init__(self, sock: Any, ports: list[int], uid: str) -> None:
        self.sock = sock
        self.ports = ports
        self.uid = uid
        self.inbuf = b""
        self.conns: dict[int, Any] = {}  # port index -> its TCP connection

    def send(self, opcode: int, payload: bytes) -> None:
        """One unmasked, final frame (a server's frames are never masked)."""
        size = len(payload)
        if size < 126:
            head = bytes([0x80 | opcode, size])
        elif size < 1 << 16:
            head = bytes([0x80 | opcode, 126]) + size.to_bytes(2, "big")
        else:
            head = bytes([0x80 | opcode, 127]) + size.to_bytes(8, "big")
        self.sock.sendall(head + payload)

    def _open(self) -> None:
        for i, port in enumerate(self.ports):
            number = port.to_bytes(2, "little")
            self.send(BINARY, bytes([2 * i]) + number)
            self.send(BINARY, bytes([2 * i + 1]) + number)
            try:
                self.conns[i] = socket.create_connection((NODE_IP, port), timeout=5)
                self.conns[i].settimeout(None)
            except OSError as exc:
                message = (
                    f"error forwarding port {port} to pod {self.uid}, uid : failed to connect "
                    f"to localhost:{port} inside namespace: {exc}"
                )
                self.send(BINARY, bytes([2 * i + 1]) + message.encode())

    def run(self) -> None:
        try:
            self._open()
            with selectors.DefaultSelector() as sel:
                sel.register(self.sock, selectors.EVENT_READ)
                for i, conn in self.conns.items():
                    sel.register(conn, selectors.EVENT_READ, i)
                while self.conns:
                    ready = [] if self.sock.pending() else sel.select()
                    from_client = any(k.fileobj is self.sock for k, _ in ready)
                    if (from_client or self.sock.pending()) and not self._from_client():
                        return
                    for key, _ in ready:
                        if key.fileobj is not self.sock:
                            self._from_pod(sel, key.data)
            self.send(CLOSE, (1000).to_bytes(2, "big"))
        finally:
            for conn in self.conns.values():
                conn.close()

    def _from_pod(self, sel: selectors.BaseSelector, index: int) -> None:
        conn = self.conns[index]
        data = conn.recv(65536)
        if data:
            self.send(BINARY, bytes([2 * index]) + data)
            return
        sel.unregister(conn)
        conn.close()
        del self.conns[index]

    def _from_client(self) -> bool:
        """Read what the client sent and act on each whole frame; False once it closed."""
        data = self.sock.recv(65536)
        if not data:
            return False
        self.inbuf += data
        while (frame := self._frame()) is not None:
            opcode, payload = frame
            if opcode == CLOSE:
                self.send(CLOSE, payload[:2])
                return False
            if opcode == PING:
                self.send(PONG, payload)
            elif opcode == BINARY and payload and payload[0] % 2 == 0:
                conn = self.conns.get(payload[0] // 2)
                if conn is not None:
                    conn.sendall(payload[1:])
        return True

    def _frame(self) -> tuple[int, bytes] | None:
        """The next whole (client, masked) frame from the buffer, or None. Fragments are not
        joined: the kubernetes clients send each message as one frame."""
        buf = self.inbuf
        if len(buf) < 2:
            return None
        opcode, size, at = buf[0] & 0x0F, buf[1] & 0x7F, 2
        if size == 126:
            size, at = int.from_bytes(buf[2:4], "big"), 4
        elif size == 127:
            size, at = int.from_bytes(buf[2:10], "big"), 10
        masked = bool(buf[1] & 0x80)
        end = at + (4 if masked else 0) + size
        if len(buf) < end:
            return None
        payload = buf[end - size : end]
        if masked:
            mask = buf[at : at + 4]
            payload = bytes(b ^ mask[j % 4] for j, b in enumerate(payload))
        self.inbuf = buf[end:]
        return opcode, payload


def serve_logs(agent: Agent, port: int, cert: Path, key: Path) -> ThreadingHTTPServer:
    """Start the kubelet HTTPS endpoint on 127.0.0.1:port in a daemon thread."""
    LogHandler.agent = agent
    server = ThreadingHTTPServer((NODE_IP, port), LogHandler)
    server.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True, name="kubelet-http").start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("--port", required=True, type=int, help="kubelet HTTPS port")
    parser.add_argument("--tls-cert", type=Path, help="serving cert (self-signed if omitted)")
    parser.add_argument("--tls-key", type=Path)
    parser.add_argument(
        "--nodes-json", help="JSON list of {name, labels, extra_capacity, taints} (optional)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    nodes = DEFAULT_NODES
    if args.nodes_json:
        nodes = tuple(NodeSpec(**n) for n in json.loads(args.nodes_json))
    cert, key = args.tls_cert, args.tls_key
    if cert is None or key is None:
        from pki import self_signed  # same directory; only needed without given certs

        pair = self_signed(args.state_dir / "tls", "kubelet")
        cert, key = pair.cert, pair.key
    agent = Agent(Kube(args.kubeconfig), nodes, args.state_dir, args.port)

    def on_signal(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping, killing all pod processes", signum)
        agent.shutdown()
        os._exit(0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    serve_logs(agent, args.port, cert, key)
    agent.register_nodes()
    threading.Thread(target=agent.heartbeat_loop, daemon=True, name="heartbeat").start()
    print("node-agent ready", flush=True)
    try:
        agent.watch_pods()
    finally:
        agent.shutdown()


if __name__ == "__main__":
    main()
