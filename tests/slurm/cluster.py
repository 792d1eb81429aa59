"""A private Slurm cluster for tests: Debian's slurm-wlm daemons, started from a scratch folder.

Everything the cluster needs lives under one temporary folder: its own munge key and socket,
``slurm.conf`` (``SLURM_CONF`` points clients at it), the controller's state, each node's
spool, the logs. ``slurmctld`` and four ``slurmd -N nN`` (one per node, each on its own
port of 127.0.0.1) run as root in the foreground, children of this process, so they are
stopped by PID and nothing else on the machine is touched; two sessions pick different
ports and folders, so they never collide.

Partitions: ``main`` (the default, never preempted), ``spot`` (preemptible: a job there is
requeued, or cancelled when it may not be requeued) and ``urgent``, whose jobs preempt
``spot``'s (``preempt/partition_prio``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

NODES = ("n1", "n2", "n3", "n4")
CPUS_PER_NODE = 2
#: Fake GPUs per node (gres.conf: ``File=`` entries naming character devices under the
#: cluster's folder, /dev/null's): Slurm schedules them and sets CUDA_VISIBLE_DEVICES /
#: SLURM_JOB_GPUS as for real ones; no GPU is behind them.
GPUS_PER_NODE = 2
START_TIMEOUT = 60.0


class SlurmClusterError(RuntimeError):
    """The private cluster could not start: the message says which daemon and its log."""


def installed() -> bool:
    return all(shutil.which(b) for b in ("munged", "slurmctld", "slurmd", "sbatch"))


def _free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 now (held open together, so they differ)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def gres_conf(root: Path) -> str:
    """Fake GPUs: ``File=`` must name character devices; these are /dev/null's (1, 3)
    under other names (made as root, as the daemons run), and nothing opens them."""
    devices = root / "dev"
    devices.mkdir(exist_ok=True)
    for i in range(GPUS_PER_NODE):
        os.mknod(devices / f"gpu{i}", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return f"AutoDetect=off\nName=gpu File={devices}/gpu[0-{GPUS_PER_NODE - 1}]\n"


def slurm_conf(root: Path, ctld_port: int, node_ports: dict[str, int], munge_socket: Path) -> str:
    host = socket.gethostname().split(".")[0]
    nodes = "\n".join(
        f"NodeName={name} NodeAddr=127.0.0.1 NodeHostname={host} Port={port} "
        f"CPUs={CPUS_PER_NODE} RealMemory=2000 Gres=gpu:{GPUS_PER_NODE} State=UNKNOWN"
        for name, port in node_ports.items()
    )
    all_nodes = ",".join(node_ports)
    return f"""\
ClusterName=kt{os.getpid()}
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={next(iter(node_ports.values()))}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge_socket}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd-%n.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd-%n.log
GresTypes=gpu
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmdTimeout=30
MessageTimeout=10
KillWait=5
InactiveLimit=0
MinJobAge=300
{nodes}
PartitionName=main Nodes={all_nodes} Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=OFF
PartitionName=spot Nodes={all_nodes} MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE
PartitionName=urgent Nodes={all_nodes} MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
"""


@dataclass
class SlurmCluster:
    """A running private cluster; ``env`` is what a client process needs (``SLURM_CONF``)."""

    root: Path
    conf: Path
    munge_socket: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True, timeout: float = 60) -> str:
        """A Slurm client command against this cluster; its stdout."""
        proc = subprocess.run(
            argv,
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode:
            raise SlurmClusterError(f"{' '.join(argv)}: {proc.stderr.strip() or proc.stdout}")
        return proc.stdout

    # ---- daemons --------------------------------------------------------------------------
    def _start(self, name: str, argv: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "ab")  # noqa: SIM115 (the daemon holds it)
        self.procs[name] = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self.env},
            start_new_session=True,  # a test's signal to its own group never reaches them
        )
        log.close()

    def start_munge(self) -> None:
        self._start(
            "munged",
            [
                "munged",
                "--foreground",
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={self.root / 'munge.key'}",
                f"--pid-file={self.root / 'run' / 'munged.pid'}",
                f"--seed-file={self.root / 'munge.seed'}",
                f"--log-file={self.root / 'log' / 'munged.log'}",
            ],
        )
        _wait(lambda: self.munge_socket.exists(), "munged", self.root / "log" / "munged.log")

    def start_controller(self, clear: bool = False) -> None:
        """``slurmctld`` in the foreground; ``clear``: forget every job it knew (``-c``)."""
        argv = ["slurmctld", "-D", "-i", "-f", str(self.conf), *(["-c"] if clear else [])]
        self._start("slurmctld", argv)
        _wait(self.controller_up, "slurmctld", self.root / "log" / "slurmctld.log")

    def stop_controller(self) -> None:
        self.stop("slurmctld", signal.SIGKILL)

    def start_node(self, node: str) -> None:
        self._start(f"slurmd-{node}", ["slurmd", "-D", "-N", node, "-f", str(self.conf)])

    def stop_node(self, node: str) -> None:
        self.stop(f"slurmd-{node}", signal.SIGKILL)

    def stop(self, name: str, sig: int = signal.SIGTERM) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(sig)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(15)

    def controller_up(self) -> bool:
        proc = subprocess.run(
            ["scontrol", "ping"],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=30,
        )
        return "UP" in proc.stdout

    def idle_nodes(self) -> set[str]:
        out = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False)
        return {n for n, s in (line.split() for line in out.splitlines()) if s in ("idle", "mix")}

    def wait_nodes(self, nodes: tuple[str, ...] = NODES) -> None:
        _wait(
            lambda: set(nodes) <= self.idle_nodes(),
            f"nodes {', '.join(nodes)} to be idle",
            self.root / "log" / "slurmctld.log",
        )

    def slurmd_pids(self) -> list[int]:
        """The PIDs of every daemon and every process they started (slurmstepd, tasks)."""
        return [p.pid for p in self.procs.values() if p.poll() is None]

    def close(self) -> None:
        """Stop every daemon this cluster started, by PID: nodes, controller, munge. Jobs
        still running are cancelled first, so no task outlives its slurmd."""
        if "slurmctld" in self.procs:
            with contextlib.suppress(Exception):
                self.run("scancel", "--full", "--user=root", check=False, timeout=15)
        for name in [n for n in self.procs if n.startswith("slurmd-")]:
            self.stop(name)
        self.stop("slurmctld")
        self.stop("munged")
        _kill_stray_steps(self.root)


def _kill_stray_steps(root: Path) -> None:
    """SIGKILL any slurmstepd (and its tasks' groups) whose config is this cluster's: a
    slurmd stopped by SIGKILL leaves its steps running."""
    marker = str(root).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if b"SLURM_CONF=" + marker in environ:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry), signal.SIGKILL)


def _wait(ready: object, what: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if ready():  # type: ignore[operator]
            return
        time.sleep(0.2)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no log)"
    raise SlurmClusterError(f"timed out waiting for {what}; {log}:\n{tail}")


@contextlib.contextmanager
def running_cluster() -> Iterator[SlurmCluster]:
    """Start a private cluster (munge, controller, four nodes); stop all of it after."""
    if not installed():
        raise SlurmClusterError(
            "Slurm is not installed: run `make slurm` (apt-get install slurm-wlm munge)."
        )
    root = Path(tempfile.mkdtemp(prefix="ks-", dir="/tmp"))  # short: a socket path <= 107
    for sub in ("state", "spool", "log", "run"):
        (root / sub).mkdir()
    for node in NODES:
        (root / "spool" / node).mkdir()
    key = root / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    ctld, *node_ports = _free_ports(1 + len(NODES))
    munge_socket = root / "munge.sock"
    conf = root / "slurm.conf"
    (root / "gres.conf").write_text(gres_conf(root))
    conf.write_text(slurm_conf(root, ctld, dict(zip(NODES, node_ports, strict=True)), munge_socket))
    cluster = SlurmCluster(root=root, conf=conf, munge_socket=munge_socket)
    try:
        cluster.start_munge()
        cluster.start_controller(clear=True)
        for node in NODES:
            cluster.start_node(node)
        cluster.wait_nodes()
        yield cluster
    finally:
        cluster.close()
        shutil.rmtree(root, ignore_errors=True)
