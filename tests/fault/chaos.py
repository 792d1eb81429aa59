"""Randomized kills against the local backend, and the checks of the engine's promise.

Each trial kills something at a random instant: the submitter inside ``submit``, the
zygote during keyed submits, the zygote's spare (the child forked ahead of the next
request) during keyed submits, a job's supervisor alone, its whole process group, or races
``cancel()`` with the job. A keyed resubmission then recovers the value, as a retrying
orchestrator would. Every job touched is checked: its function ran at most once (each run
appends its pid to a file named after the job id), no process of it is alive once its
state is terminal, and (at the end) no terminal state changed. Used by
``tests/fault/test_chaos.py`` and ``bench/chaos.py``.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kinetic_core as kc
from kinetic_core.backends.local import zygote as zygote_module
from kinetic_core.util.ids import keyed_id
from kinetic_core.util.procs import process_alive, wait_exit
from tests.fault import chaosfns

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("submitter", "zygote", "spare", "supervisor", "group", "cancel")
COLUMNS = (
    "trials",
    "acknowledged",
    "recovered",
    "duplicates",
    "orphans",
    "state_flips",
    "zygote_deaths",
    "leftovers",
)

SUBMITTER = """
import sys
sys.path.insert(0, {root!r})
import kinetic_core as kc
from tests.fault import chaosfns
print("ready", flush=True)
job = kc.submit(chaosfns.trace, ({traces!r}, 0.05, {value}), target={target!r},
                idempotency_key={key!r})
print(job.job_id, flush=True)
"""


@dataclass
class Tally:
    trials: int = 0
    acknowledged: int = 0
    recovered: int = 0
    duplicates: int = 0
    orphans: int = 0
    state_flips: int = 0
    zygote_deaths: int = 0
    leftovers: int = 0
    killed_in_submit: int = 0  # submitter kills that landed before submit returned
    problems: list[str] = field(default_factory=list)
    # Not the local backend's promise: cancel() returned True and the job still ended
    # otherwise (cancel semantics belong to status resolution, issue 10 defect 8).
    notes: list[str] = field(default_factory=list)

    def row(self) -> dict[str, int]:
        return {c: getattr(self, c) for c in COLUMNS}

    def fail(self, column: str, what: str) -> None:
        setattr(self, column, getattr(self, column) + 1)
        self.problems.append(f"{column}: {what}")


class Chaos:
    def __init__(self, root: Path, seed: int) -> None:
        self.rng = random.Random(seed)
        self.store = root / "store"
        self.traces = root / "traces"
        self.traces.mkdir(parents=True, exist_ok=True)
        self.target = {"storage": f"file://{self.store}"}
        self.socket = str(root / "zygote" / "zygote.sock")
        (root / "zygote").mkdir(mode=0o700, exist_ok=True)
        os.environ["KINETIC_ZYGOTE_SOCKET"] = self.socket  # ours alone: safe to kill
        self.tally = Tally()
        self.first_terminal: dict[str, str] = {}
        self.keys: list[str] = []

    # ---- trials ---------------------------------------------------------------------------
    def run(self, trials: int, progress: bool = False) -> Tally:
        self.window = self._submit_time() * 1.5  # kills land before, inside and after submit
        for i in range(trials):
            kind = KINDS[i % len(KINDS)]
            getattr(self, f"_{kind}")(i)
            self.tally.trials += 1
            if progress and (i + 1) % 25 == 0:
                print(f"  {i + 1} trials, {len(self.tally.problems)} problems", flush=True)
        self.finish()
        return self.tally

    def _submitter(self, i: int) -> None:
        key = f"sub-{i}"
        zygote = self._zygote_pid()
        child = self._start_submitter(key, i)
        time.sleep(self.rng.uniform(0, self.window))
        child.kill()
        out = child.communicate()[0].decode().split()
        acked = out[0] if out else None
        self.tally.killed_in_submit += acked is None
        if zygote and not process_alive(zygote):
            self.tally.fail(
                "zygote_deaths", f"zygote {zygote} died when submitter of {key} was killed"
            )
        self._recover(key, i, acked)

    def _start_submitter(self, key: str, value: int) -> subprocess.Popen[bytes]:
        """A process about to submit (it printed "ready"); it prints the job id once acked."""
        script = SUBMITTER.format(
            root=str(ROOT), traces=str(self.traces), value=value, target=self.target, key=key
        )
        child = subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert child.stdout is not None
        child.stdout.readline()
        return child

    def _submit_time(self) -> float:
        """How long one submit takes in a fresh process here and now (one unkilled run)."""
        child = self._start_submitter("calibrate", -1)
        started = time.monotonic()
        assert child.stdout is not None
        child.stdout.readline()
        elapsed = time.monotonic() - started
        child.wait()
        self._recover("calibrate", -1, None)  # checked like any job; not a trial
        return elapsed

    def _zygote(self, i: int) -> None:
        keys = [f"zyg-{i}-{j}" for j in range(3)]
        zygote = self._zygote_pid()
        if zygote:
            threading.Timer(self.rng.uniform(0, 0.03), _kill, (zygote,)).start()
        for j, key in enumerate(keys):
            self._recover(key, i * 10 + j, None, acknowledge=True)

    def _spare(self, i: int) -> None:
        """The spare dies waiting, while it takes a connection, or (when the timer fires
        late) as the supervisor it became; the zygote lives on and forks for its jobs."""
        keys = [f"spa-{i}-{j}" for j in range(3)]
        zygote = self._zygote_pid()
        spare = spare_of(zygote) if zygote else None
        if spare:
            threading.Timer(self.rng.uniform(0, 0.03), _kill, (spare,)).start()
        for j, key in enumerate(keys):
            self._recover(key, i * 10 + j, None, acknowledge=True)
        if zygote and not process_alive(zygote):
            self.tally.fail("zygote_deaths", f"zygote {zygote} died when its spare was killed")

    def _supervisor(self, i: int, group: bool = False) -> None:
        key = f"{'grp' if group else 'sup'}-{i}"
        duration = self.rng.uniform(0.05, 0.3)
        job = kc.submit(
            chaosfns.trace,
            (str(self.traces), duration, i),
            target=self.target,
            idempotency_key=key,
        )
        time.sleep(self.rng.uniform(0, 0.3))
        launch = self._launch(job.job_id)
        if launch is not None:
            _kill(launch["pid"], group=group)
        self._settle(job.job_id)
        self._recover(key, i, None, acknowledge=True, duration=duration)

    def _group(self, i: int) -> None:
        self._supervisor(i, group=True)

    def _cancel(self, i: int) -> None:
        key = f"can-{i}"
        job = kc.submit(
            chaosfns.trace, (str(self.traces), 0.2, i), target=self.target, idempotency_key=key
        )
        time.sleep(self.rng.uniform(0, 0.25))
        stopped = job.cancel()
        state = self._settle(job.job_id)
        if stopped and state is not None and state.status is not kc.JobStatus.CANCELLED:
            self.tally.notes.append(f"cancel: {job.job_id} reported stopping, ended {state.status}")
        self._recover(key, i, None, acknowledge=True, duration=0.2)

    # ---- recovery and checks ---------------------------------------------------------------
    def _recover(
        self,
        key: str,
        value: int,
        acked: str | None,
        *,
        acknowledge: bool = False,
        duration: float = 0.05,
    ) -> None:
        """Keyed resubmission of the trial's own call until the value comes back, as a
        retrying orchestrator does (the same call: another one under the key is refused)."""
        self.keys.append(key)
        counted = bool(acked or acknowledge)
        self.tally.acknowledged += counted
        for _ in range(6):
            try:
                job = kc.submit(
                    chaosfns.trace,
                    (str(self.traces), duration, value),
                    target=self.target,
                    idempotency_key=key,
                )
            except kc.IdempotencyConflict as exc:  # not the trial's own call: a test bug
                self.tally.problems.append(f"{key}: {exc}")
                break
            except kc.SubmissionError:
                continue  # e.g. the zygote was killed mid-launch: nothing of it runs
            if acked and job.job_id != acked:
                self.tally.problems.append(f"acknowledged {acked} not reused (got {job.job_id})")
            try:
                got = job.result(timeout=60)
            except (kc.JobFailed, kc.JobCancelled):
                self._settle(job.job_id)
                continue
            if got == value:
                self.tally.recovered += counted
            else:
                self.tally.problems.append(f"{key}: got {got!r}, expected {value!r}")
            break
        else:
            self.tally.problems.append(f"{key}: no value after 6 submits")
        for job_id in self._attempts(key):
            self._settle(job_id)

    def _settle(self, job_id: str) -> kc.JobState | None:
        """Wait for a terminal state, then check the job has no process and ran at most once."""
        try:
            state = kc.attach(job_id, target=self.target).wait(timeout=60)
        except kc.WaitTimeout:
            self.tally.fail("leftovers", f"{job_id} still not terminal after 60 s")
            return None
        except kc.JobNotFound:
            return None
        alive = job_processes(self.store).get(job_id)
        if alive:
            self.tally.fail(
                "orphans", f"{job_id} reads {state.status.value} with processes {alive}"
            )
        self.first_terminal.setdefault(job_id, state.status.value)
        if len(chaosfns.runs(str(self.traces / job_id))) > 1:
            self.tally.fail(
                "duplicates", f"{job_id} ran {chaosfns.runs(str(self.traces / job_id))}"
            )
        return state

    def _attempts(self, key: str) -> list[str]:
        ids = []
        n = 1
        while (self.store / "jobs" / keyed_id(key, n) / "handle.json").exists():
            ids.append(keyed_id(key, n))
            n += 1
        return ids

    def finish(self) -> None:
        """Re-read every terminal state (none may change) and count what was left behind."""
        for job_id, first in self.first_terminal.items():
            now = kc.attach(job_id, target=self.target).state().status.value
            if now != first:
                self.tally.fail("state_flips", f"{job_id}: {first} -> {now}")
        for job_id, pids in job_processes(self.store).items():
            self.tally.fail("leftovers", f"processes of {job_id} still alive: {pids}")
        subprocess.run(  # a fresh writer sweeps staging files of killed writers
            [
                sys.executable,
                "-c",
                f"import sys; sys.path.insert(0, {str(ROOT)!r}); from kinetic_core.storage import "
                f"open_storage; open_storage({self.target['storage']!r}).write_bytes('sweep', b'')",
            ],
            check=True,
        )
        for name in os.listdir(self.store / "tmp"):
            self.tally.fail("leftovers", f"staging file {name}")
        for aborted in (self.store / "backend-local").glob(".aborted-*"):
            self.tally.fail("leftovers", f"aborted launch directory {aborted.name}")
        zygote_module.reap()  # zygotes of ours that exited: the next launch would reap them
        for pid, name in zombie_children():
            self.tally.fail("leftovers", f"zombie child {pid} ({name})")
        zygote = self._zygote_pid()
        if zygote:
            spare = spare_of(zygote)
            _kill(zygote)
            if spare:
                wait_exit(spare, 10)
                if process_alive(spare):
                    self.tally.fail("leftovers", f"spare {spare} outlived its zygote {zygote}")

    def _zygote_pid(self) -> int | None:
        try:
            pid = int(Path(f"{self.socket}.pid").read_text())
        except (OSError, ValueError):
            return None
        return pid if process_alive(pid) else None

    def _launch(self, job_id: str) -> dict[str, Any] | None:
        try:
            record: dict[str, Any] = json.loads(
                (self.store / "backend-local" / job_id / "launch.json").read_text()
            )
        except (OSError, ValueError):
            return None
        return record


def spare_of(zygote: int) -> int | None:
    """The zygote's spare: its child that is not yet a supervisor (each supervisor leads
    its own session), or None."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, ppid, session = fields[0], int(fields[1]), int(fields[3])
        if ppid == zygote and session != int(entry) and state != "Z":
            return int(entry)
    return None


def _kill(pid: int, *, group: bool = False) -> None:
    try:
        (os.killpg if group else os.kill)(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # it already ended


def job_processes(store: Path) -> dict[str, list[int]]:
    """Live processes of local jobs under ``store``, by job id: a job's supervisor and
    everything it started write to the job's log, so their stdout names the job."""
    marker = f"{store}/backend-local/"
    found: dict[str, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            link = os.readlink(f"/proc/{entry}/fd/1")
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if not link.startswith(marker) or state == "Z":
            continue
        name = link[len(marker) :].split("/", 1)[0]
        if name.startswith(".aborted-"):
            name = name[len(".aborted-") :].rsplit("-", 2)[0]
        found.setdefault(name, []).append(int(entry))
    return found


def zombie_children() -> list[tuple[int, str]]:
    """This process's exited, unreaped children: (pid, command name)."""
    me = str(os.getpid())
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[1] == me and fields[0] == "Z":
            found.append((int(entry), stat.split("(", 1)[1].rsplit(")", 1)[0]))
    return found


def table(row: dict[str, int]) -> str:
    head = " | ".join(COLUMNS)
    return (
        f"| {head} |\n|{'---|' * len(COLUMNS)}\n| "
        + " | ".join(str(row[c]) for c in COLUMNS)
        + " |"
    )
