"""The runner stops itself once its job was decided stopped in storage.

A cancel, a limit (``schedule_timeout``, ``life_span``) or a status resolution that
sealed an end (``Lost``) first records the job's outcome (``outcome.json``), then asks the
backend to stop its processes. The backend's channel can be gone: a Slurm job that
slurmctld forgot on a node whose slurmd is down, a pod on a partitioned node, a
canceller killed between its record and its stop. Storage is the channel left, and the
runner already reads it every tick for signal requests (``signals.Watcher``): when that
read shows an outcome decided by anyone but a runner, this runner stops as a cancel stops
a job on every backend: SIGTERM (the function's ``on_preemption`` callbacks run, and
``finally`` blocks), then, after ``KINETIC_KILL_GRACE`` seconds, SIGKILL.

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
from typing import Any

from kinetic_core.records.lifecycle import BY_RUNNER, read_outcome
from kinetic_core.storage import Storage
from kinetic_core.util.procs import group_members, kill_group_members

#: Seconds between the SIGTERM and the SIGKILL (the local supervisor's variable, default).
GRACE_ENV = "KINETIC_KILL_GRACE"
GRACE_SECONDS = 5.0


class DecidedStop:
    """Looks for job ``job_id``'s outcome when asked (``check``), acts on it once."""

    def __init__(self, storage: Storage, job_id: str) -> None:
        self.storage, self.job_id = storage, job_id
        self.settled = False  # an outcome was seen: nothing more to look for

    def check(self) -> None:
        """Read the outcome (the caller saw ``outcome.json`` listed); stop on a decided stop."""
        if self.settled:
            return
        outcome = read_outcome(self.storage, self.job_id)
        if outcome is None:  # torn, or naming another job: look again next tick
            return
        self.settled = True
        if outcome.get("by") != BY_RUNNER:
            stop(_why(self.job_id, outcome))


def _why(job_id: str, outcome: dict[str, Any]) -> str:
    return (
        f"job {job_id} was decided {outcome.get('status')} ({outcome.get('reason')}, by "
        f"{outcome.get('by')}: {outcome.get('message')}) while it ran: stopping it"
    )


def stop(why: str) -> None:
    """SIGTERM to this process's main thread (its handler runs, its waits are interrupted)
    and to the rest of its group when it leads one; SIGKILL to what is left after the grace."""
    print(f"kinetic: {why}", file=sys.stderr, flush=True)
    me = os.getpid()
    leader = os.getpgrp() == me
    signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGTERM)
    for pid in group_members(me) if leader else []:
        _signal(pid, signal.SIGTERM)
    grace = float(os.environ.get(GRACE_ENV) or GRACE_SECONDS)
    timer = threading.Timer(grace, _kill, (leader,))
    timer.daemon = True  # it dies with the runner: a runner that ended needs no SIGKILL
    timer.start()


def _kill(leader: bool) -> None:
    print("kinetic: still running after the kill grace: SIGKILL", file=sys.stderr, flush=True)
    if leader:
        kill_group_members(os.getpid())
    os.kill(os.getpid(), signal.SIGKILL)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
