"""What the backend contract needs from one backend: a ``Harness``.

The contract cases (test_backend_contract.py) know nothing of any backend: they launch
jobs through ``harness.backend`` (the real ``Backend`` object) and ask the harness what
only it can tell or do: which executions of a job are alive (processes, pods), which
top-level objects exist (a supervisor, a Job), which records are left, and how to inject
this backend's real faults (orphan a job's processes, a transient launch error, a launch
whose answer is lost). A new backend, or a variant of one, passes the same suite by
adding one harness to ``harnesses.HARNESSES``: the multi-host JobSet variant of the
Kubernetes backend is ``jobset_harness.JobSetHarness``, a gang of 2 workers.

A multi-host job runs its function on every worker, so one launch of it is ONE execution
(the gang: every worker pod of one JobSet attempt), and a run of it is a run of worker 0:
``contract_fns`` begins each line it records with the worker's index
(``KINETIC_WORKER_INDEX``, 0 on a single-host job) and ``Held.count`` counts worker 0's.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import kinetic_core as kc
from kinetic_core.backends import Backend, BackendState, LaunchSpec, get_backend
from kinetic_core.control.launching import launch_spec
from kinetic_core.control.polling import poll_ticks
from kinetic_core.jobs.submission import prepare
from kinetic_core.storage import Storage, open_storage
from kinetic_core.util.ids import new_id

FNS = "tests.contract.contract_fns"  # shipped by value: pods cannot import tests/
# Jobs are signed, as in production: a launch then carries a secret (a Kubernetes Secret,
# the local supervisor's signed launch record) that delete must remove too.
SIGNING_KEY = "contract-signing-key"
ENDED = ("exited", "gone", "not_found")


def until(what: str | Callable[[], str], check: Callable[[], Any], timeout: float = 90) -> Any:
    """Poll ``check`` until it returns something truthy; WaitTimeout names ``what`` (a
    callable is asked at the timeout, so it can say what was left then)."""
    describe = what if callable(what) else lambda: what
    for _ in poll_ticks(interval=0.3, timeout=timeout, describe=describe):
        value = check()
        if value:
            return value
    return None


@dataclass
class Fault:
    """A fault a harness injected: ``injected`` counts how often it really struck, so a
    case proves its fault happened instead of passing because nothing was injected."""

    what: str
    injected: int = 0


@dataclass
class Held:
    """A ``contract_fns.hold`` (or ``mark``) job's files: one line per run of each worker,
    beginning with the worker's index; the release file ends it."""

    runs: Path
    release: Path

    def args(self) -> tuple[str, str]:
        return str(self.runs), str(self.release)

    def lines(self) -> list[str]:
        return self.runs.read_text().splitlines() if self.runs.exists() else []

    def count(self, worker: int = 0) -> int:
        """Runs of the job: of its worker 0 (a multi-host job runs its function on every
        worker; a single-host job's one run is worker 0's), or of ``worker``."""
        return sum(1 for line in self.lines() if line.split()[:1] == [str(worker)])

    def wait_started(self) -> None:
        until(f"the held job to start ({self.runs})", self.count)

    def let_go(self) -> None:
        self.release.touch()


class Harness(ABC):
    """One backend under the contract, with its fault injection and process counting."""

    name: str
    #: Can this backend meet a transient fault that outlasts its retry policy at launch?
    has_lasting_fault: bool = False

    def __init__(
        self, request: pytest.FixtureRequest, tmp: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        self.tmp = tmp
        self.job_ids: list[str] = []
        self.helds: list[Held] = []
        self.target = self.setup(request, monkeypatch).resolve()
        self.backend: Backend = get_backend(self.target)

    @abstractmethod
    def setup(self, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> kc.Target:
        """Prepare this backend's environment (fixtures, variables); the target its jobs
        go to, with its storage under ``self.tmp``."""

    # ---- jobs ---------------------------------------------------------------------------
    def spec(self, fn: Callable[..., Any], *args: Any) -> LaunchSpec:
        """Stage ``fn(*args)`` as a new job (its call envelope in storage) and return the
        LaunchSpec the core would hand the backend; nothing is launched yet."""
        plan = prepare(fn, args, target=self.target)
        job_id = new_id("contract")
        plan.stage(job_id)
        self.job_ids.append(job_id)
        return launch_spec(job_id, self.target.storage or "", plan.target, plan.tags)

    def held(self) -> Held:
        n = len(self.helds)
        held = Held(self.tmp / f"runs-{n}.txt", self.tmp / f"release-{n}")
        self.helds.append(held)
        return held

    @property
    def storage(self) -> Storage:
        return open_storage(self.target.storage or "")

    def state(self, job_id: str) -> BackendState:
        return self.backend.poll([job_id])[job_id]

    def wait_ended(self, job_id: str, timeout: float = 120) -> BackendState:
        """Until poll says the job ended and none of its executions is alive."""
        states: list[BackendState] = []

        def ended() -> bool:
            states[:] = [self.state(job_id)]
            return states[0].phase in ENDED and not self.executions(job_id)

        until(
            lambda: (
                f"job {job_id} to end (last poll: {states[-1] if states else None}, "
                f"alive: {self.executions(job_id)})"
            ),
            ended,
            timeout,
        )
        return states[0]

    # ---- what only the harness can see --------------------------------------------------
    @abstractmethod
    def executions(self, job_id: str) -> list[str]:
        """The job's separate executions alive now (a process group, a pod, the worker
        pods of one JobSet attempt): one launch is one execution."""

    @abstractmethod
    def tops(self, job_id: str) -> list[str]:
        """The job's top-level objects that exist now (a live supervisor, a Job, a
        JobSet)."""

    @abstractmethod
    def records(self, job_id: str) -> list[str]:
        """Every backend record of the job still there (files, Jobs, Secrets, pods)."""

    # ---- faults -------------------------------------------------------------------------
    @abstractmethod
    def orphan(self, job_id: str) -> None:
        """Remove the job's top-level object the way an outsider can, leaving its
        processes or pods running; returns once the top-level object is gone."""

    @abstractmethod
    def transient_launch_fault(self) -> contextlib.AbstractContextManager[Fault]:
        """A real transient fault that strikes the next launch, then passes."""

    def lasting_launch_fault(self) -> contextlib.AbstractContextManager[Fault]:
        """A transient fault that lasts past the retry policy (``has_lasting_fault``)."""
        raise NotImplementedError(f"the {self.name} harness has no lasting launch fault")

    @abstractmethod
    def lost_answer(self, spec: LaunchSpec) -> contextlib.AbstractContextManager[Fault]:
        """Inside the block, ``spec`` is (or gets) launched but the launcher never learns
        it: the answer is lost after the backend took the launch."""

    # ---- teardown -----------------------------------------------------------------------
    def cleanup(self) -> None:
        """Release held jobs, then remove whatever the jobs left, by means independent of
        the backend under test (it may be the thing that is broken)."""
        for held in self.helds:
            held.let_go()


def monkeypatch_env(monkeypatch: pytest.MonkeyPatch, storage: str) -> None:
    """The process-wide settings every harness starts from."""
    monkeypatch.setenv("KINETIC_STORAGE", storage)
    monkeypatch.delenv("KINETIC_SIGNING_KEY", raising=False)
    monkeypatch.delenv("KINETIC_BACKEND", raising=False)
