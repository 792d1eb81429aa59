"""The Slurm backend under the contract, on the private test cluster (tests/slurm/cluster.py).

An execution is a Slurm job whose tasks still run: found by the processes on this machine
(every node's slurmd runs here) whose environment names the job (``SLURM_JOB_NAME``) and
this cluster (``SLURM_CONF``), so tasks Slurm itself forgot still count. The top-level
object is the job's live record in slurmctld. Faults are real daemons stopped: slurmctld
down during a launch (restarted seconds later), a submitter SIGKILLed between sbatch's
answer and recording it, and slurmctld restarted with its state wiped while the job's
node's slurmd is down (Slurm forgets the job; its tasks run on).
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.backends import LaunchSpec
from kinetic_core.backends.slurm import SlurmBackend, job_name
from tests.contract.harness import FNS, SIGNING_KEY, Fault, Harness, monkeypatch_env, until
from tests.slurm.cluster import NODES, SlurmCluster

ROOT = Path(__file__).resolve().parents[2]
LIVE_STATES = "PD,CF,R,CG,S"
# Seconds slurmctld stays down during a launch: several of the retry policy's waits.
OUTAGE_S = 6.0
# A submitter SIGKILLed once sbatch answered, before it recorded the answer.
SUBMIT_THEN_DIE = (
    "import os, pickle, signal, sys\n"
    "from kinetic_core.backends import get_backend\n"
    "from kinetic_core.backends.slurm.backend import SlurmBackend\n"
    "SlurmBackend._record_id = lambda *a: os.kill(os.getpid(), signal.SIGKILL)\n"
    "spec = pickle.loads(sys.stdin.buffer.read())\n"
    "get_backend(spec.target).launch(spec)\n"
)


class SlurmHarness(Harness):
    name = "slurm"

    def setup(self, request: pytest.FixtureRequest, mp: pytest.MonkeyPatch) -> kc.Target:
        self.cluster: SlurmCluster = request.getfixturevalue("slurm_cluster")
        storage = f"file://{self.tmp / 'store'}"
        monkeypatch_env(mp, storage)
        for name, value in self.cluster.env.items():
            mp.setenv(name, value)
        self.conf = f"SLURM_CONF={self.cluster.conf}".encode()
        return kc.Target(
            backend="slurm",
            storage=storage,
            signing_key=SIGNING_KEY,
            pickle_by_value=[FNS],
            poll_interval=0.5,
        )

    @property
    def slurm(self) -> SlurmBackend:
        assert isinstance(self.backend, SlurmBackend)
        return self.backend

    # ---- what is there ------------------------------------------------------------------
    def _tasks(self, job_id: str) -> dict[int, str]:
        """Live processes of the job on this machine: pid -> its Slurm job id."""
        name = f"SLURM_JOB_NAME={job_name(job_id)}".encode()
        found: dict[int, str] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
                zombie = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
            except (OSError, IndexError):
                continue
            if name in environ and self.conf in environ and not zombie:
                ids = [
                    v[len(b"SLURM_JOB_ID=") :] for v in environ if v.startswith(b"SLURM_JOB_ID=")
                ]
                found[int(entry)] = ids[0].decode() if ids else "?"
        return found

    def executions(self, job_id: str) -> list[str]:
        return sorted({f"slurm job {j}" for j in self._tasks(job_id).values()})

    def _live_ids(self, job_id: str) -> list[str]:
        out = self.cluster.run(
            "squeue", "-h", "-t", LIVE_STATES, f"--name={job_name(job_id)}", "-o", "%i"
        )
        return out.split()

    def tops(self, job_id: str) -> list[str]:
        return [f"slurm job {i}" for i in self._live_ids(job_id)]

    def records(self, job_id: str) -> list[str]:
        folder = self.slurm.slurm_dir / job_id
        found = [str(folder), *(str(p) for p in folder.iterdir())] if folder.exists() else []
        return found + self.tops(job_id)

    # ---- faults -------------------------------------------------------------------------
    def orphan(self, job_id: str) -> None:
        """The job's nodes lose their slurmd (SIGKILL: the tasks run on) and slurmctld
        restarts with its state wiped: Slurm no longer knows the job."""
        nodes = self.cluster.run("squeue", "-h", f"--name={job_name(job_id)}", "-o", "%N").split()
        hosts = self.cluster.run("scontrol", "show", "hostnames", *nodes).split()
        assert hosts, f"job {job_id} runs on no node to orphan it from"
        self.stopped = hosts
        for node in hosts:
            self.cluster.stop_node(node)
        self.cluster.stop("slurmctld")
        self.cluster.start_controller(clear=True)
        until(f"slurmctld to forget {job_id}", lambda: not self._live_ids(job_id))

    @contextlib.contextmanager
    def transient_launch_fault(self) -> Iterator[Fault]:
        """slurmctld is stopped as the launch begins and started again OUTAGE_S later."""
        fault = Fault(f"slurmctld stopped for {OUTAGE_S:g}s during the launch")
        self.cluster.stop("slurmctld")
        fault.injected = int(not self.cluster.controller_up())

        def restart() -> None:
            time.sleep(OUTAGE_S)
            self.cluster.start_controller()

        thread = threading.Thread(target=restart)
        thread.start()
        try:
            yield fault
        finally:
            thread.join()

    @contextlib.contextmanager
    def lost_answer(self, spec: LaunchSpec) -> Iterator[Fault]:
        """Another submitter's sbatch is answered, and it is SIGKILLed before it records
        the answer: Slurm has the job; no one heard."""
        fault = Fault("submitter SIGKILLed between sbatch's answer and recording it")
        proc = subprocess.run(
            [sys.executable, "-c", SUBMIT_THEN_DIE],
            input=pickle.dumps(spec),
            cwd=ROOT,
            capture_output=True,
            timeout=120,
        )
        assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
        recorded = (self.slurm.slurm_dir / spec.job_id / "slurm_job_id").exists()
        fault.injected = int(bool(self._live_ids(spec.job_id)) and not recorded)
        yield fault

    # ---- teardown -----------------------------------------------------------------------
    def cleanup(self) -> None:
        super().cleanup()
        if not self.cluster.controller_up():
            self.cluster.start_controller()
        for node in getattr(self, "stopped", []):
            self.cluster.start_node(node)
        for job_id in self.job_ids:
            self.cluster.run("scancel", f"--name={job_name(job_id)}", check=False)
            for pid in self._tasks(job_id):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.cluster.wait_nodes(NODES)
