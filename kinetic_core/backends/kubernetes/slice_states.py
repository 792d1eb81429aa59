"""What a JobSet (a multi-host or queued job), its child Jobs, their pods and its Kueue
Workload mean: ``jobset_state`` makes them one BackendState (interfaces point 3).

Each worker (child Job ``<jobset>-workers-<i>`` and its pods) is read as a single-host job
is (``states.job_state``); the gang then reads:

- queued (suspended, Workload not admitted): pending ``Queued`` with Kueue's message;
- pending while any worker is pending (``Unschedulable`` if any is);
- running when every worker runs (a worker that already ended well counts as running:
  the job ends with worker 0 and the JobSet);
- ended when the JobSet failed (``failurePolicy.maxRestarts: 0``: one failed worker fails
  it and JobSet stops the others) or a worker ended badly first: the first failing worker's
  exit code and reason, the message naming the worker; ``Preempted`` when a worker was
  preempted, evicted or removed with its node (recovery restarts the whole slice); a
  worker whose pod was deleted and whose replacement refused to run the function again
  (exit ``REFUSED_EXIT_CODE``) is ``gone`` (Lost, recovered), never that exit's failure;
- a JobSet being deleted (a cancel, cleanup, someone's delete) before it finished is not
  found, as a single-host Job being deleted (a worker that ended badly first still says
  why): never pending or running while nothing of it is made again;
- but never ended while any worker pod's process may still run (not finished, not on a
  node presumed lost): running ``Terminating`` until the last is gone, so attempt n+1 of
  a gang starts only after every worker pod of attempt n is gone (issue 34).
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from kinetic_core.backends import BackendState
from kinetic_core.backends.kubernetes.jobset import JOB_INDEX, QUEUE_LABEL
from kinetic_core.backends.kubernetes.states import (
    _ended_state,
    _lost_node_state,
    _ts,
    alive,
    job_state,
    kinetic_container_status,
    refused,
)
from kinetic_core.config.target import DEFAULT_LOST_GRACE
from kinetic_core.states import Reason

_FIRST_FAILED = re.compile(r"first failed job: (?P<job>[^)\s]+)")


def _index(obj: dict[str, Any]) -> int | None:
    value = (obj.get("metadata", {}).get("labels") or {}).get(JOB_INDEX)
    return int(value) if value is not None and str(value).isdigit() else None


def _true(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return dict(cond)
    return None


def _named(state: BackendState, index: int) -> BackendState:
    """``state`` with its message saying which worker it is about."""
    words = f"worker {index}" + (f": {state.message}" if state.message else "")
    return BackendState(
        state.phase,
        exit_code=state.exit_code,
        reason=state.reason,
        message=words,
        started_at=state.started_at,
        finished_at=state.finished_at,
    )


def queued_state(jobset: dict[str, Any], workload: dict[str, Any] | None) -> BackendState | None:
    """Pending ``Queued`` while Kueue has not admitted the job (its JobSet suspended),
    with Kueue's own message; None once admitted."""
    labels = jobset.get("metadata", {}).get("labels") or {}
    if QUEUE_LABEL not in labels or not jobset.get("spec", {}).get("suspend"):
        return None
    if workload is not None and _true(workload, "Admitted"):
        return None  # admitted; JobSet unsuspends it next
    message = None
    for cond in (workload or {}).get("status", {}).get("conditions") or []:
        if cond.get("type") == "QuotaReserved" and cond.get("message"):
            message = cond["message"]
    queue = labels[QUEUE_LABEL]
    return BackendState(
        "pending",
        reason=Reason.QUEUED,
        message=f"waiting for Kueue to admit it in LocalQueue {queue}"
        + (f": {message}" if message else ""),
    )


def jobset_state(
    jobset: dict[str, Any] | None,
    jobs: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    nodes: dict[str, dict[str, Any]] | None = None,
    workload: dict[str, Any] | None = None,
    lost_grace: float = DEFAULT_LOST_GRACE,
) -> BackendState:
    """The BackendState of a JobSet job (see the module docstring). A pending one's
    ``started_at`` is when its Jobs were made (its admission, when queued), from which
    status resolution counts ``schedule_timeout`` of a queued job."""
    if jobset is None:  # deleted: its pods may still be stopping (or it was never made)
        return job_state(None, pods, nodes, lost_grace)
    queued = queued_state(jobset, workload)
    if queued is not None:
        return queued
    replicas = sum(r.get("replicas", 1) for r in jobset.get("spec", {}).get("replicatedJobs", []))
    by_index: dict[int, list[dict[str, Any]]] = {}
    for pod in pods:
        index = _index(pod)
        if index is not None:
            by_index.setdefault(index, []).append(pod)
    job_of = {i: j for j in jobs if (i := _index(j)) is not None}
    state = _ended_or_live(jobset, jobs, job_of, by_index, replicas, nodes, lost_grace)
    if state.phase in ("exited", "gone", "not_found"):
        stopping = [p for p in pods if _may_run(p, nodes or {}, lost_grace)]
        if stopping:  # the gang ended only once no worker's process may run
            return _stopping(state, stopping)
    return state


def _may_run(pod: dict[str, Any], nodes: dict[str, dict[str, Any]], lost_grace: float) -> bool:
    """A worker pod whose process may still run: alive, not on a node presumed lost, and
    not held before its start for ever (a Secret it needs is missing: no process)."""
    if not alive(pod):
        return False
    waiting = kinetic_container_status(pod.get("status", {})).get("state", {}).get("waiting")
    if (waiting or {}).get("reason") == "CreateContainerConfigError":
        return False
    trouble = _lost_node_state([pod], nodes, None, lost_grace)
    return trouble is None or trouble.phase == "running"


def _stopping(ended: BackendState, live: list[dict[str, Any]]) -> BackendState:
    """A gang that ended (a worker failed, was disrupted or deleted; the JobSet failed)
    while other workers' processes still run or stop: running ``Terminating`` until the
    last is gone, so a successor attempt never starts beside any of them (JobSet stops
    the others of a failed JobSet; a recovery's cancel deletes them)."""
    names = sorted(
        f"worker {i}" if (i := _index(p)) is not None else p["metadata"].get("name", "?")
        for p in live
    )
    why = ended.message or "the job ended"
    return BackendState(
        "running",
        reason=Reason.TERMINATING,
        message=f"{why}; {', '.join(names)} still stopping",
        started_at=ended.started_at,
    )


def _ended_or_live(
    jobset: dict[str, Any],
    jobs: list[dict[str, Any]],
    job_of: dict[int, dict[str, Any]],
    by_index: dict[int, list[dict[str, Any]]],
    replicas: int,
    nodes: dict[str, dict[str, Any]] | None,
    lost_grace: float,
) -> BackendState:
    """The gang from its JobSet's conditions and its workers, before asking whether any
    worker's process still runs."""
    failed = _true(jobset, "Failed")
    if failed is not None:
        return _failed_state(jobset, failed, job_of, by_index)
    if _true(jobset, "Completed"):
        status = jobset.get("status", {})
        return BackendState(
            "exited",
            exit_code=0,
            reason=Reason.COMPLETED,
            finished_at=_ts(
                next(
                    (
                        c.get("lastTransitionTime")
                        for c in status.get("conditions") or []
                        if c.get("type") == "Completed"
                    ),
                    None,
                )
            ),
        )
    workers = {
        i: job_state(job_of[i], by_index.get(i, []), nodes, lost_grace) if i in job_of else None
        for i in range(replicas)
    }
    state = _gang_state(workers)
    deleting = bool(jobset.get("metadata", {}).get("deletionTimestamp"))
    if deleting and state.phase in ("pending", "running"):
        # Being deleted (a cancel, cleanup, someone's delete): no worker is made again, and
        # its Jobs read "being deleted". As a single-host Job being deleted: not found, and
        # running ``Terminating`` while a worker's process may still run (``jobset_state``).
        return BackendState("not_found", message="the JobSet is being deleted")
    if state.phase == "pending":  # since when it may be scheduled: its Jobs' creation
        made = [t for j in jobs if (t := _ts(j["metadata"].get("creationTimestamp")))]
        state = replace(state, started_at=min(made) if made else None)
    return state


def _gang_state(workers: dict[int, BackendState | None]) -> BackendState:
    """Every worker's state as the job's: an ended worker first, then pending, then running."""
    ended = [
        (i, s)
        for i, s in workers.items()
        if s is not None and s.phase in ("exited", "gone") and s.reason != Reason.COMPLETED
    ]
    if ended:
        preempted = [(i, s) for i, s in ended if s.reason in (Reason.PREEMPTED, Reason.NODE_LOST)]
        i, s = min(preempted or ended, key=lambda p: (p[1].finished_at or float("inf"), p[0]))
        return _named(s, i)
    pending = [(i, s) for i, s in workers.items() if s is None or s.phase == "pending"]
    if pending:
        waiting = [(i, s) for i, s in pending if s is not None and s.reason]
        unschedulable = [(i, s) for i, s in waiting if s.reason == Reason.UNSCHEDULABLE]
        if unschedulable or waiting:
            i, s = (unschedulable or waiting)[0]
            return _named(s, i)
        return BackendState("pending", message=f"{len(pending)} of {len(workers)} workers pending")
    starts = [s.started_at for s in workers.values() if s is not None and s.started_at]
    unreachable = [(i, s) for i, s in workers.items() if s is not None and s.reason]
    if unreachable and unreachable[0][1].phase == "running":
        i, s = unreachable[0]
        return _named(s, i)
    return BackendState("running", started_at=max(starts) if starts else None)


def _failed_state(
    jobset: dict[str, Any],
    failed: dict[str, Any],
    job_of: dict[int, dict[str, Any]],
    by_index: dict[int, list[dict[str, Any]]],
) -> BackendState:
    """The JobSet failed: the first failed worker (upstream names its Job) says why, read
    as a single-host Job's end (its pod's exit, a disruption, a pod removed with its node,
    a deadline)."""
    found = _FIRST_FAILED.search(failed.get("message") or "")
    index = None
    if found is not None:
        tail = found["job"].rsplit("-", 1)[-1]
        index = int(tail) if tail.isdigit() else None
    if index is None:
        index = next(iter(sorted(i for i, j in job_of.items() if _true(j, "Failed"))), None)
    job = job_of.get(index) if index is not None else None
    if index is None or job is None:
        why = ": ".join(w for w in (failed.get("reason"), failed.get("message")) if w)
        return BackendState(
            "exited",
            reason=Reason.PREEMPTED,
            message=f"the JobSet failed ({why}); its Jobs are gone",
        )
    ended = [
        p for p in by_index.get(index, []) if not p.get("metadata", {}).get("deletionTimestamp")
    ]
    real = [p for p in ended if not refused(p)]
    if ended and not real:  # its pod was deleted; the replacement refused to run it again
        return _named(
            BackendState(
                "gone",
                message="its pod was deleted and the replacement pod refused to run the "
                "function more than once",
            ),
            index,
        )
    pod = max(real, key=lambda p: p["metadata"].get("creationTimestamp", "")) if real else None
    state = _ended_state(job, pod)
    if state.phase != "exited":  # the Job had not yet recorded its own end
        state = BackendState("exited", reason=Reason.PREEMPTED, message=state.message)
    return _named(state, index)
