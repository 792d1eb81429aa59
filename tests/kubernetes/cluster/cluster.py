"""A real Kubernetes 1.20 control plane on 127.0.0.1 for the test suite.

Why: kind/k3s/docker are not available where the suite runs, but the Kubernetes backend must
be tested against real API semantics (validation, the Job controller, scheduling, garbage
collection, pod logs, audit). `TestCluster` starts etcd, kube-apiserver,
kube-controller-manager and kube-scheduler built by ``build.sh``, plus ``node_agent.py`` which
plays the kubelet for the fake nodes and runs pods as local processes, and stand-ins for
the JobSet and Kueue controllers over their CRDs (README: "JobSet and Kueue (stand-ins)").

Security setup (all throw-away, generated per start): one CA signs the API server's serving
cert, its kubelet client cert and the agent's kubelet serving cert; the API server verifies the
kubelet with ``--kubelet-certificate-authority`` (no TLS verification is skipped anywhere).
Clients authenticate with a static bearer token (``--token-auth-file``) of a user in
``system:masters``; authorization is RBAC.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any

from . import crds, pki

K8S_VERSION = "v1.20.2"
HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"
# build.sh caches into $KINETIC_TEST_CLUSTER_CACHE/<version>/bin (same default as here).
CACHE_ROOT = Path(
    os.environ.get("KINETIC_TEST_CLUSTER_CACHE", Path.home() / ".cache" / "kinetic-test-cluster")
)
BIN_DIR = CACHE_ROOT / K8S_VERSION / "bin"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
CONTROLLERS = ("kube-controller-manager", "kube-scheduler")
NODE_NAMES = ("node-cpu", "node-gpu", "node-tpu", "node-spot", "node-tpu-spot")
# the 4 hosts of the multi-host v5e 4x4 slice (node_agent.DEFAULT_NODES)
SLICE_NODE_NAMES = tuple(f"node-tpu-slice-{i}" for i in range(4))
STAND_INS = ("jobset-controller", "kueue-controller")  # JobSet and Kueue, see README
CONTEXT = "kinetic-test"
# The Role kinetic needs in a namespace (docs/kubernetes.md, "Permissions"); tests grant it
# to a ServiceAccount (a batch driver's pod) or take a verb away from it.
KINETIC_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": ["batch"],
        "resources": ["jobs"],
        "verbs": ["create", "get", "list", "watch", "delete"],
    },
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["get", "list", "watch", "delete", "deletecollection"],
    },
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "get", "patch", "delete"]},
    {
        "apiGroups": ["jobset.x-k8s.io"],
        "resources": ["jobsets"],
        "verbs": ["create", "get", "list", "watch", "delete"],
    },
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "list"]},
]
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
"""


class ClusterError(RuntimeError):
    """The cluster could not be built or started; the message says which part and why."""


def binaries_present() -> bool:
    """True when build.sh's cache holds every binary the cluster needs, built by its current
    recipe (its RECIPE line, written to bin/.recipe: an older build is rebuilt)."""
    recipe = re.search(r'^RECIPE="(.*)"$', BUILD_SCRIPT.read_text(), re.MULTILINE)
    stamp = BIN_DIR / ".recipe"
    built = stamp.read_text().strip() if stamp.is_file() else ""
    return bool(recipe and built == recipe[1]) and all(
        os.access(BIN_DIR / b, os.X_OK) for b in BINARIES
    )


def ensure_built(timeout: float = 3600) -> None:
    """Run build.sh when binaries are missing; raise ClusterError with its output on failure."""
    if binaries_present():
        return
    started = time.monotonic()
    proc = subprocess.run(
        ["bash", str(BUILD_SCRIPT)],
        env={**os.environ, "KINETIC_TEST_CLUSTER_CACHE": str(CACHE_ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0 or not binaries_present():
        output = (proc.stdout + proc.stderr)[-4000:]
        raise ClusterError(f"{BUILD_SCRIPT} failed (exit {proc.returncode}):\n{output}")
    print(f"test cluster binaries built in {time.monotonic() - started:.0f}s", file=sys.stderr)


def free_port() -> int:
    """A currently free TCP port on 127.0.0.1 (the kernel's choice)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"<no log: {exc}>"


class TestCluster:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler + node agent.

    Use as a context manager or call `start()`/`stop()`. After `start()`:
    `kubeconfig_path`, `server`, `token`, `ca_path`, `audit_log_path`, `start_seconds`.
    Set KINETIC_TEST_CLUSTER_KEEP=1 to keep the temp dir (logs, audit log) after `stop()`.
    """

    __test__ = False  # not a pytest test class despite the name

    def __init__(self, start_timeout: float = 180) -> None:
        self.start_timeout = start_timeout
        self.token = "kinetic-admin-" + os.urandom(12).hex()
        self.dir: Path | None = None
        self.kubeconfig_path: Path | None = None
        self.server = ""
        self.ca_path: Path | None = None
        self.audit_log_path: Path | None = None
        self.start_seconds = 0.0
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._argv: dict[str, list[str]] = {}
        self._healthz: dict[str, str] = {}  # controller -> its /healthz URL
        self.agent_port = 0
        self._ssl: ssl.SSLContext | None = None
        self._ca: pki.CertAuthority | None = None

    # ---- lifecycle ------------------------------------------------------------------------

    def __enter__(self) -> TestCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start every component and wait until the cluster can run pods."""
        if not binaries_present():
            raise ClusterError(f"binaries missing in {BIN_DIR}; run {BUILD_SCRIPT}")
        began = time.monotonic()
        self.dir = Path(tempfile.mkdtemp(prefix="kinetic-k8s-"))
        atexit.register(self.stop)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - began

    def _start(self) -> None:
        assert self.dir is not None
        d = self.dir
        (d / "logs").mkdir()
        pki_dir = d / "pki"
        pki_dir.mkdir()
        ca = pki.CertAuthority(pki_dir)
        self._ca = ca
        self.ca_path = ca.cert_path
        serving = ca.issue("apiserver", "kube-apiserver", server=True)
        kubelet_client = ca.issue(
            "apiserver-kubelet-client",
            "kube-apiserver-kubelet-client",
            server=False,
            organizations=("system:masters",),
        )
        kubelet_serving = ca.issue("kubelet", "kinetic-node-agent", server=True)
        sa = pki.service_account_keys(pki_dir)
        self._ssl = ssl.create_default_context(cafile=str(ca.cert_path))

        # etcd on tmpfs when available: fsync-heavy, and nothing here needs to survive.
        shm = Path("/dev/shm")
        etcd_dir = Path(tempfile.mkdtemp(prefix="etcd-", dir=shm if shm.is_dir() else d))
        (d / "etcd-dir").write_text(str(etcd_dir))
        etcd_port, peer_port = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        self._spawn(
            "etcd",
            [
                str(BIN_DIR / "etcd"),
                "--name=kinetic",
                f"--data-dir={etcd_dir}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=kinetic=http://127.0.0.1:{peer_port}",
                "--log-level=warn",
            ],
        )
        self._wait("etcd", lambda: self._http_ok(f"{etcd_url}/health"), 30)

        api_port = free_port()
        self.server = f"https://127.0.0.1:{api_port}"
        tokens = d / "tokens.csv"
        tokens.write_text(f'{self.token},kinetic-admin,kinetic-admin,"system:masters"\n')
        tokens.chmod(0o600)
        policy = d / "audit-policy.yaml"
        policy.write_text(AUDIT_POLICY)
        self.audit_log_path = d / "audit.log"
        self._spawn(
            "kube-apiserver",
            [
                str(BIN_DIR / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                "--insecure-port=0",
                f"--cert-dir={d / 'apiserver-certs'}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--client-ca-file={ca.cert_path}",
                # Only to stop the controller-manager/scheduler delegated authn from logging
                # errors about a missing request-header CA; nothing uses a front proxy.
                f"--requestheader-client-ca-file={ca.cert_path}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                # The `kubernetes` Service cannot have a loopback endpoint; nothing needs it.
                "--endpoint-reconciler-type=none",
                f"--token-auth-file={tokens}",
                "--authorization-mode=RBAC",
                f"--service-account-key-file={sa.cert}",
                f"--service-account-signing-key-file={sa.key}",
                "--service-account-issuer=https://kubernetes.default.svc",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--allow-privileged=true",
                f"--audit-policy-file={policy}",
                f"--audit-log-path={self.audit_log_path}",
                "--audit-log-format=json",
                "--audit-log-mode=blocking",
                f"--kubelet-certificate-authority={ca.cert_path}",
                f"--kubelet-client-certificate={kubelet_client.cert}",
                f"--kubelet-client-key={kubelet_client.key}",
                "--kubelet-preferred-address-types=InternalIP",
                "--feature-gates=TTLAfterFinished=true",
                "--profiling=false",
                "--v=1",
            ],
        )
        self._wait("kube-apiserver", lambda: self._http_ok(f"{self.server}/readyz"), 90)
        self.kubeconfig_path = self._write_kubeconfig(d / "kubeconfig")

        kubeconfig = str(self.kubeconfig_path)
        common = [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            "--port=0",
            "--profiling=false",
            "--v=1",
        ]
        cm_port, sched_port = free_port(), free_port()
        self._spawn(
            "kube-controller-manager",
            [
                str(BIN_DIR / "kube-controller-manager"),
                *common,
                f"--secure-port={cm_port}",
                f"--cert-dir={d / 'cm-certs'}",
                "--controllers=*",
                "--feature-gates=TTLAfterFinished=true",
                f"--service-account-private-key-file={sa.key}",
                f"--root-ca-file={ca.cert_path}",
                "--use-service-account-credentials=false",
                "--allocate-node-cidrs=false",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                str(BIN_DIR / "kube-scheduler"),
                *common,
                f"--secure-port={sched_port}",
                f"--cert-dir={d / 'sched-certs'}",
            ],
        )
        self.agent_port = free_port()
        self._spawn(
            "node-agent",
            [
                sys.executable,
                str(HERE / "node_agent.py"),
                f"--kubeconfig={kubeconfig}",
                f"--state-dir={d / 'agent'}",
                f"--port={self.agent_port}",
                f"--tls-cert={kubelet_serving.cert}",
                f"--tls-key={kubelet_serving.key}",
            ],
        )
        self._start_stand_ins(kubeconfig)
        self._healthz = {
            "kube-scheduler": f"https://127.0.0.1:{sched_port}/healthz",
            "kube-controller-manager": f"https://127.0.0.1:{cm_port}/healthz",
        }
        self._wait_controllers()
        self._wait("node-agent", self._nodes_ready, 60, what="all nodes Ready")
        # Pods are rejected by the ServiceAccount admission plugin until the default
        # ServiceAccount exists and the token controller has given it a token secret.
        self._wait(
            "kube-controller-manager",
            self._default_service_account_ready,
            60,
            what="the default ServiceAccount with its token",
        )

    def _start_stand_ins(self, kubeconfig: str) -> None:
        """Serve the JobSet and Kueue CRDs (Established before any test runs) and start the
        stand-in controllers that act on them (README: "JobSet and Kueue (stand-ins)")."""
        crds.install(self.api)
        for name in STAND_INS:
            module = name.replace("-", "_") + ".py"
            self._spawn(name, [sys.executable, str(HERE / module), f"--kubeconfig={kubeconfig}"])

    def stop(self) -> None:
        """Stop every process started (agent first, so it kills its pods) and clean up."""
        for name in reversed(list(self._procs)):
            self._terminate(name, self._procs[name])
        self._procs.clear()
        if self.dir is None:
            return
        # Pod process groups the agent could not kill (e.g. it was SIGKILLed).
        pid_dir = self.dir / "agent" / "pids"
        if pid_dir.is_dir():
            for pid_file in pid_dir.iterdir():
                with contextlib.suppress(ValueError, OSError):
                    os.killpg(int(pid_file.read_text()), signal.SIGKILL)
        etcd_dir = self.dir / "etcd-dir"
        if etcd_dir.exists():
            shutil.rmtree(etcd_dir.read_text(), ignore_errors=True)
        if os.environ.get("KINETIC_TEST_CLUSTER_KEEP") == "1":
            print(f"test cluster files kept in {self.dir}", file=sys.stderr)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None

    # ---- helpers for tests ----------------------------------------------------------------

    def log_path(self, component: str) -> Path:
        """The stdout+stderr log of one component (etcd, kube-apiserver, ..., node-agent)."""
        assert self.dir is not None, "cluster not started"
        return self.dir / "logs" / f"{component}.log"

    def audit_events(self) -> list[dict[str, Any]]:
        """Every audit event so far (ResponseComplete/ResponseStarted/Panic stages)."""
        assert self.audit_log_path is not None, "cluster not started"
        if not self.audit_log_path.exists():
            return []
        events = []
        for line in self.audit_log_path.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                events.append(json.loads(line))
        return events

    def count_requests(
        self,
        verb: str,
        resource: str,
        user_agent: str | None = None,
        stage: str = "ResponseComplete",
    ) -> int:
        """How many completed requests with this verb/resource (and user agent) were audited."""
        return sum(
            1
            for e in self.audit_events()
            if e.get("verb") == verb
            and e.get("stage") == stage
            and (e.get("objectRef") or {}).get("resource") == resource
            and (user_agent is None or e.get("userAgent") == user_agent)
        )

    # ---- identities: RBAC-trimmed service accounts, client certificates -------------------

    def api(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        """One request as the cluster admin (raises urllib.error.HTTPError on an error)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.server + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30, context=self._ssl) as resp:
            answer = resp.read()
        return dict(json.loads(answer)) if answer else {}

    def grant(self, account: str, rules: list[dict[str, Any]], namespace: str = "default") -> None:
        """Make ServiceAccount ``account`` (created if missing) hold exactly ``rules`` in
        ``namespace``: a Role and RoleBinding named after it, replaced if they exist."""
        ns = f"/api/v1/namespaces/{namespace}"
        rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
        meta = {"name": account, "namespace": namespace}
        role = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": rules,
        }
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        }
        for path, body in (
            (f"{ns}/serviceaccounts", {"metadata": meta}),
            (f"{rbac}/roles", role),
            (f"{rbac}/rolebindings", binding),
        ):
            try:
                self.api("POST", path, body)
            except urllib.error.HTTPError as exc:
                if exc.code != 409:
                    raise
                if "serviceaccounts" not in path:
                    self.api("PUT", f"{path}/{account}", body)

    def service_account_kubeconfig(
        self, account: str, rules: list[dict[str, Any]], namespace: str = "default"
    ) -> str:
        """Kubeconfig content (context ``kinetic-test``) that authenticates as ServiceAccount
        ``account`` holding ``rules`` (``grant``), with the token the token controller made."""
        self.grant(account, rules, namespace)
        token = self._wait_token(account, namespace)
        return self._kubeconfig_content({"token": token})

    def client_cert_kubeconfig(self, user: str = "kinetic-cert-user") -> tuple[str, bytes]:
        """Kubeconfig content whose user is a client certificate (``client-certificate-data``
        and ``client-key-data``) of a cluster admin, and the private key's PEM bytes."""
        assert self._ca is not None and self.dir is not None, "cluster not started"
        pair = self._ca.issue(
            f"client-{user}", user, server=False, organizations=("system:masters",)
        )
        key = pair.key.read_bytes()
        cert = pair.cert.read_bytes()
        pair.key.unlink()  # only the kubeconfig content holds it from now on
        b64 = lambda raw: base64.b64encode(raw).decode()  # noqa: E731
        content = self._kubeconfig_content(
            {"client-certificate-data": b64(cert), "client-key-data": b64(key)}, ca_data=True
        )
        return content, key

    def _wait_token(self, account: str, namespace: str) -> str:
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            secrets = self.api("GET", path).get("secrets") or []
            if secrets:
                secret = self.api(
                    "GET", f"/api/v1/namespaces/{namespace}/secrets/{secrets[0]['name']}"
                )
                return base64.b64decode(secret["data"]["token"]).decode()
            time.sleep(0.2)
        raise ClusterError(f"no token Secret for ServiceAccount {namespace}/{account} after 60s")

    def _kubeconfig_content(self, user: dict[str, str], ca_data: bool = False) -> str:
        assert self.ca_path is not None
        cluster: dict[str, Any] = {"server": self.server}
        if ca_data:
            cluster["certificate-authority-data"] = base64.b64encode(
                self.ca_path.read_bytes()
            ).decode()
        else:
            cluster["certificate-authority"] = str(self.ca_path)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": CONTEXT, "cluster": cluster}],
            "users": [{"name": CONTEXT, "user": user}],
            "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT}}],
            "current-context": CONTEXT,
        }
        return json.dumps(config, indent=2) + "\n"

    # ---- faults for reliability tests ----------------------------------------------------

    @contextlib.contextmanager
    def control_plane_outage(self) -> Iterator[None]:
        """The control plane (API server, controller manager, scheduler) is down inside the
        block (killed) and back, ready, after it: as when GKE upgrades or repairs it, the
        components restart together. Controllers left running would come back blind: their
        watches back off (up to a minute) after failing through the outage, and a Job
        controller that misses a pod's creation waits 5 minutes before replacing it."""
        for name in (*CONTROLLERS, "kube-apiserver"):
            proc = self._procs.pop(name)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        try:
            yield
        finally:
            self._spawn("kube-apiserver", self._argv["kube-apiserver"])
            self._wait("kube-apiserver", lambda: self._http_ok(f"{self.server}/readyz"), 90)
            for name in CONTROLLERS:
                self._spawn(name, self._argv[name])
            self._wait_controllers()

    def restart_node_agent(self) -> None:
        """SIGKILL the node agent (its pods' processes are left orphaned, as when a kubelet
        dies) and start it again; it must reconcile the pods it finds."""
        proc = self._procs.pop("node-agent")
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)  # the agent only, not its pods' process groups
        proc.wait(timeout=30)
        self._spawn("node-agent", self._argv["node-agent"])
        self._wait("node-agent", lambda: self.agent_control("healthz") == "ok", 60)

    def delete_node(self, node: str, grace: float = 15, disruption_target: bool = True) -> None:
        """A spot VM reclaimed (or a node removed by the autoscaler), as GKE does it: the
        node's pods shut down gracefully (SIGTERM, SIGKILL after ``grace`` s), the Node
        object deleted, its pods garbage-collected; ``disruption_target``: the pods carry
        the ``DisruptionTarget`` condition as on GKE 1.26+ (see node_agent.delete_node).
        Returns once the node and its pods are gone; ``restore_node`` brings it back."""
        self.agent_control(
            "delete-node",
            timeout=grace + 120,
            node=node,
            grace=grace,
            condition=int(disruption_target),
        )

    def restore_node(self, node: str) -> None:
        """A deleted or lost node back under its name (the autoscaler's replacement VM, a
        partition healed); returns once every node is Ready and schedulable again."""
        self.agent_control("restore-node", node=node)
        self._wait("node-agent", self._nodes_ready, 60, what="all nodes Ready")

    def agent_control(self, action: str, timeout: float = 30, **params: str | int | float) -> str:
        """Ask the node agent to simulate a fault (see node_agent.CONTROL_ACTIONS)."""
        query = "&".join(f"{k}={v}" for k, v in params.items())
        path = "healthz" if action == "healthz" else f"kinetic/{action}"
        url = f"https://127.0.0.1:{self.agent_port}/{path}" + (f"?{query}" if query else "")
        try:
            with urllib.request.urlopen(url, timeout=timeout, context=self._ssl) as resp:
                return str(resp.read().decode())
        except urllib.error.HTTPError as exc:
            raise ClusterError(f"node agent refused {action}: {exc.read().decode()}") from exc
        except (urllib.error.URLError, OSError) as exc:
            if action == "healthz":
                return ""
            raise ClusterError(f"node agent unreachable for {action}: {exc}") from exc

    # ---- internals ------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str]) -> None:
        assert self.dir is not None
        self._argv[name] = argv
        log = (self.dir / "logs" / f"{name}.log").open("ab")
        self._procs[name] = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: stop() can kill it whole
            cwd=os.getcwd(),
        )
        log.close()

    def _terminate(self, name: str, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=15)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)

    def _wait(
        self, component: str, ready: Callable[[], bool], timeout: float, what: str = "ready"
    ) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self._procs.items():
                if proc.poll() is not None:
                    raise ClusterError(
                        f"{name} exited with {proc.returncode} while waiting for "
                        f"{component} ({what}); last log lines:\n{_tail(self.log_path(name))}"
                    )
            if ready():
                return
            time.sleep(0.2)
        raise ClusterError(
            f"{component} not {what} after {timeout:.0f}s; last log lines:\n"
            f"{_tail(self.log_path(component))}"
        )

    def _wait_controllers(self) -> None:
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # their self-signed /healthz certs; probe only
        for name in CONTROLLERS:
            self._wait(name, partial(self._http_ok, self._healthz[name], insecure), 60)

    def _http_ok(self, url: str, context: ssl.SSLContext | None = None) -> bool:
        headers = {"Authorization": f"Bearer {self.token}"} if url.startswith(self.server) else {}
        req = urllib.request.Request(url, headers=headers)
        ctx = context or (self._ssl if url.startswith("https") else None)
        try:
            with urllib.request.urlopen(req, timeout=5, context=ctx) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _api_get(self, path: str) -> dict[str, Any] | None:
        req = urllib.request.Request(
            self.server + path, headers={"Authorization": f"Bearer {self.token}"}
        )
        try:
            with urllib.request.urlopen(req, timeout=5, context=self._ssl) as resp:
                return dict(json.loads(resp.read()))
        except (urllib.error.URLError, OSError, json.JSONDecodeError):
            return None

    def _default_service_account_ready(self) -> bool:
        sa = self._api_get("/api/v1/namespaces/default/serviceaccounts/default")
        return bool(sa and sa.get("secrets"))

    def _nodes_ready(self) -> bool:
        nodes = self._api_get("/api/v1/nodes")
        if nodes is None:
            return False
        ready = {
            n["metadata"]["name"]
            for n in nodes["items"]
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n.get("status", {}).get("conditions", [])
            )
            # the node lifecycle controller lifts this taint once it has seen the node Ready
            and not any(
                t["key"] == "node.kubernetes.io/not-ready"
                for t in n.get("spec", {}).get("taints", [])
            )
        }
        return ready >= set(NODE_NAMES) | set(SLICE_NODE_NAMES)

    def _write_kubeconfig(self, path: Path) -> Path:
        path.write_text(self._kubeconfig_content({"token": self.token}))  # JSON is valid YAML
        path.chmod(0o600)
        return path


@contextlib.contextmanager
def running_cluster() -> Iterator[TestCluster]:
    """A started cluster for suites outside tests/kubernetes (the examples end to end);
    start it after the GCS emulator so its node agent can reach it."""
    ensure_built()
    cluster = TestCluster()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def run_examples_here(
    cluster: TestCluster, storage_uri: str, monkeypatch: Any, workdir: Path
) -> None:
    """Point this process at the cluster and ``storage_uri`` the way ``make demo`` is pointed
    at the local backend, with a fresh model-registry key, from an empty working folder
    (nothing may pass from the examples to their pods through the submitter's folder)."""
    # A detached batch's driver pod reaches the API as the namespace's default service
    # account (in-cluster credentials): it holds the Role kinetic needs, as docs/kubernetes.md
    # asks of a platform team.
    cluster.grant("default", KINETIC_RULES)
    env = {
        **kinetic_env(cluster, storage_uri),
        "NIGHTLY_REGISTRY_KEY": f"reg-{os.urandom(4).hex()}",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(workdir)


def kinetic_env(cluster: TestCluster, storage_uri: str) -> dict[str, str]:
    """KINETIC_* variables that send jobs to this cluster with ``storage_uri``."""
    return {
        "KINETIC_STORAGE": storage_uri,
        "KINETIC_BACKEND": "kubernetes",
        "KINETIC_KUBE_CONTEXT": CONTEXT,
        "KINETIC_NAMESPACE": "default",
        "KINETIC_POLL_INTERVAL": "0.5",
        "KUBECONFIG": str(cluster.kubeconfig_path),
    }
