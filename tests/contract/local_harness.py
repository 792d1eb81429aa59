"""The local backend under the contract: a job is a detached supervisor process group.

An execution is a process group holding the job's processes (the supervisor leads its
own; its runner and whatever the function started belong to it); the top-level object is
the supervisor. Faults are real: SIGKILL the supervisor (its runner dies with it, the
function's child lives on), SIGKILL the zygote that forks supervisors right before a
launch, and a submitter process SIGKILLed right after its launch returned.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kinetic_core as kc
from kinetic_core.backends import LaunchSpec
from kinetic_core.backends.local import LocalBackend, zygote
from kinetic_core.backends.local.launch_record import LAUNCH, LOG
from kinetic_core.util.procs import process_alive, start_ticks, stdout_of
from tests.cleanup import kill_leftovers
from tests.contract import contract_fns
from tests.contract.harness import FNS, SIGNING_KEY, Fault, Harness, monkeypatch_env, until

ROOT = Path(__file__).resolve().parents[2]
# A submitter that launches the job, then dies before anyone hears back from it.
LAUNCH_THEN_DIE = (
    "import os, pickle, signal, sys\n"
    "from kinetic_core.backends import get_backend\n"
    "spec = pickle.loads(sys.stdin.buffer.read())\n"
    "get_backend(spec.target).launch(spec)\n"
    "os.kill(os.getpid(), signal.SIGKILL)\n"
)


class LocalHarness(Harness):
    name = "local"

    def setup(self, request: pytest.FixtureRequest, mp: pytest.MonkeyPatch) -> kc.Target:
        storage = f"file://{self.tmp / 'store'}"
        monkeypatch_env(mp, storage)
        # A zygote of our own (its socket in a private folder): killing it as a fault must
        # not touch any other test's zygote.
        self.zygote_dir = Path(tempfile.mkdtemp(prefix="kz-"))
        mp.setenv("KINETIC_ZYGOTE_SOCKET", str(self.zygote_dir / "zygote.sock"))
        mp.setenv("KINETIC_LOCAL_ZYGOTE", "1")
        self._groups: dict[str, set[int]] = {}  # job id -> process groups seen
        return kc.Target(
            backend="local",
            storage=storage,
            signing_key=SIGNING_KEY,
            pickle_by_value=[FNS],
            poll_interval=0.5,
        )

    @property
    def local(self) -> LocalBackend:
        assert isinstance(self.backend, LocalBackend)
        return self.backend

    # ---- what is there ------------------------------------------------------------------
    def _launch(self, job_id: str) -> dict[str, Any] | None:
        try:
            record = json.loads((self.local.local_dir / job_id / LAUNCH).read_text())
        except (FileNotFoundError, ValueError):
            return None
        self._groups.setdefault(job_id, set()).add(record["pid"])  # it leads its group
        return dict(record)

    def _processes(self, job_id: str) -> dict[int, int]:
        """Live processes of the job (pid -> process group): those in a group the job's
        supervisor led, and any whose stdout is the job's log."""
        self._launch(job_id)
        groups = self._groups.get(job_id, set())
        log = os.path.realpath(self.local.local_dir / job_id / LOG)
        found: dict[int, int] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == os.getpid():
                continue
            pid = int(entry)
            try:
                pgid = os.getpgid(pid)
            except ProcessLookupError:
                continue
            ours = pgid in groups or stdout_of(pid) in (log, f"{log} (deleted)")
            if ours and start_ticks(pid) not in (None, -1):  # a zombie is dead
                found[pid] = pgid
                self._groups.setdefault(job_id, set()).add(pgid)
        return found

    def executions(self, job_id: str) -> list[str]:
        return sorted({f"process group {g}" for g in self._processes(job_id).values()})

    def tops(self, job_id: str) -> list[str]:
        launch = self._launch(job_id)
        if launch is None or not process_alive(launch["pid"], launch.get("start_ticks")):
            return []
        return [f"supervisor {launch['pid']}"]

    def records(self, job_id: str) -> list[str]:
        found = []
        for folder in (
            self.local.local_dir / job_id,
            self.local.local_dir / ".submitting" / job_id,
        ):
            if folder.exists():
                found += [str(folder), *(str(p) for p in folder.iterdir())]
        return found

    # ---- faults -------------------------------------------------------------------------
    def orphan(self, job_id: str) -> None:
        """SIGKILL the supervisor: its runner dies with it (PDEATHSIG); a process the
        function started lives on in the job's process group."""
        launch = self._launch(job_id)
        assert launch is not None, f"job {job_id} has no launch record to orphan"
        os.kill(launch["pid"], signal.SIGKILL)
        until(
            f"supervisor {launch['pid']} to die",
            lambda: not process_alive(launch["pid"], launch.get("start_ticks")),
        )

    def _zygote_pid(self) -> int | None:
        path = zygote.socket_path()
        try:
            pid = int(Path(f"{path}.pid").read_text())
        except (OSError, ValueError):
            return None
        return pid if process_alive(pid) else None

    @contextlib.contextmanager
    def transient_launch_fault(self) -> Iterator[Fault]:
        """SIGKILL the zygote right before the launch: its socket is still there, but no
        one answers on it."""
        fault = Fault("zygote SIGKILLed before the launch")
        if self._zygote_pid() is None:  # start one the way any launch does
            warm = self.held()
            self.backend.launch(self.spec(contract_fns.mark, str(warm.runs)))
        pid = self._zygote_pid()
        assert pid is not None, "no zygote serves the local backend: nothing to kill"
        os.kill(pid, signal.SIGKILL)
        until(f"zygote {pid} to die", lambda: not process_alive(pid))
        fault.injected = 1
        yield fault

    @contextlib.contextmanager
    def lost_answer(self, spec: LaunchSpec) -> Iterator[Fault]:
        """Another submitter process launches ``spec`` and is SIGKILLed as its launch
        returns: the launch happened; its answer reached no one."""
        fault = Fault("submitter SIGKILLed right after its launch returned")
        proc = subprocess.run(
            [sys.executable, "-c", LAUNCH_THEN_DIE],
            input=pickle.dumps(spec),
            cwd=ROOT,
            capture_output=True,
            timeout=120,
        )
        assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()
        fault.injected = int(self._launch(spec.job_id) is not None)
        yield fault

    # ---- teardown -----------------------------------------------------------------------
    def cleanup(self) -> None:
        super().cleanup()
        kill_leftovers(self.tmp / "store")
        for job_id in self.job_ids:
            for pid in self._processes(job_id):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        pid = self._zygote_pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
