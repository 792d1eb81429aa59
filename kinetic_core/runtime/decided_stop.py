"""The runner stops itself once its job was decided stopped in storage.

A cancel, a limit (``schedule_timeout``, ``life_span``) or a status resolution that
sealed an end (``Lost``) first records the job's outcome (``outcome.json``), then asks the
backend to stop its processes. The backend's channel can be gone: a Slurm job that
slurmctld forgot on a node whose slurmd is down, a pod on a partitioned node, a
canceller killed between its record and its stop. Storage is the channel left, and the
runner already reads it every tick for signal requests (``signals.Watcher``): when that
read shows an outcome decided by anyone but a runner, this runner stops as a cancel stops
a job on every backend: SIGTERM (the function's ``on_preemption`` callbacks run, and
``finally`` blocks), then, after ``KINETIC_KILL_GRACE`` seconds, SIGKILL. As it ends (the
sidecar's stop, in the runner's last ``finally``; or right before the SIGKILL) it records
``self-stopped-worker-{k}.json``: where the backend cannot see the job's processes
(Slurm after a node failure), that record is how their end is known.

When the runner leads its own process group (a Slurm task, a container's first process)
the rest of the group (what the function started) gets the same signals; under the local
supervisor, which leads the group, the supervisor stops what is left once the runner ends.
An outcome decided by a runner (this job's worker 0 or a failing worker) stops nothing
here: the job ended by itself, and its workers end as the backend ends them.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from kinetic_core.records import layout
from kinetic_core.records.lifecycle import BY_RUNNER, read_outcome, write_record
from kinetic_core.storage import Storage
from kinetic_core.util.procs import group_members, kill_group_members, signal_all

#: Seconds between the SIGTERM and the SIGKILL (the local supervisor's variable, default).
GRACE_ENV = "KINETIC_KILL_GRACE"
GRACE_SECONDS = 5.0


class DecidedStop:
    """Looks for job ``job_id``'s outcome when asked (``check``), acts on it once."""

    def __init__(self, storage: Storage, job_id: str, worker: int) -> None:
        self.storage, self.job_id, self.worker = storage, job_id, worker
        self.settled = False  # an outcome was seen: nothing more to look for
        self.stopping = False  # this runner is stopping on a decided end

    def check(self) -> None:
        """Read the outcome (the caller saw ``outcome.json`` listed); stop on a decided stop."""
        if self.settled:
            return
        outcome = read_outcome(self.storage, self.job_id)
        if outcome is None:  # torn, or naming another job: look again next tick
            return
        self.settled = True
        if outcome.get("by") != BY_RUNNER:
            self.stopping = True
            stop(_why(self.job_id, outcome), self.ended)

    def ended(self) -> None:
        """Called as the runner ends (the sidecar's stop, or right before the SIGKILL): if
        it is ending on a decided end, say so in storage. A backend that cannot see its
        processes (Slurm, after a node failure) waits for this record."""
        if not self.stopping:
            return
        self.stopping = False  # once
        try:
            write_record(
                self.storage,
                self.job_id,
                layout.SELF_STOPPED.format(self.worker),
                event="self-stopped",
                worker=self.worker,
            )
        except Exception as exc:  # storage down: the backend's bounded wait covers it
            print(f"kinetic: could not record the stop: {exc}", file=sys.stderr, flush=True)


def _why(job_id: str, outcome: dict[str, Any]) -> str:
    return (
        f"job {job_id} was decided {outcome.get('status')} ({outcome.get('reason')}, by "
        f"{outcome.get('by')}: {outcome.get('message')}) while it ran: stopping it"
    )


def stop(why: str, ending: Callable[[], None]) -> None:
    """SIGTERM to this process's main thread (its handler runs, its waits are interrupted)
    and to the rest of its group when it leads one; SIGKILL to what is left after the grace.
    ``ending`` runs right before the SIGKILL."""
    print(f"kinetic: {why}", file=sys.stderr, flush=True)
    me = os.getpid()
    leader = os.getpgrp() == me
    signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)
    if leader:
        signal_all(group_members(me), signal.SIGTERM)
    grace = float(os.environ.get(GRACE_ENV) or GRACE_SECONDS)
    timer = threading.Timer(grace, _kill, (leader, ending))
    timer.daemon = True  # it dies with the runner: a runner that ended needs no SIGKILL
    timer.start()


def _kill(leader: bool, ending: Callable[[], None]) -> None:
    print("kinetic: still running after the kill grace: SIGKILL", file=sys.stderr, flush=True)
    ending()
    if leader:
        kill_group_members(os.getpid())
    os.kill(os.getpid(), signal.SIGKILL)
    os._exit(128 + signal.SIGKILL)  # a container's first process ignores its own SIGKILL
