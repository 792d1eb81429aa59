"""What a Job and its pods mean: ``job_state`` turns them into a BackendState whose reason a
person can act on (Unschedulable, ImagePullBackOff, OOMKilled, DeadlineExceeded, Preempted).

A Job that failed while none of its pods is left (each was removed with its node: a
reclaimed spot VM, a node the autoscaler removed, and the pod GC) reads ``Preempted``;
status resolution gives a runner's recorded outcome precedence over it.

A running pod whose node stopped reporting (node Ready=Unknown/False or tainted
unreachable) reads RUNNING with reason ``NodeUnreachable``, then, past the target's
``lost_grace`` (default 120 s), ``gone`` with reason ``NodeLost``: status resolution makes
that a FAILED job with reason ``Lost`` unless storage holds its result.
"""

from __future__ import annotations

import time
from datetime import datetime
from functools import partial
from typing import Any

from kinetic_core.backends import BackendState
from kinetic_core.backends.kubernetes.pod_spec import KINETIC_CONTAINER
from kinetic_core.config.target import DEFAULT_LOST_GRACE
from kinetic_core.states import REFUSED_EXIT_CODE, Reason


def _ts(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


# How long a pod may wait for its job's deleted signing-key Secret before the job ends.
SECRET_MISSING_GRACE = 30.0
UNREACHABLE_TAINTS = ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")


def pod_not_ready(pod: dict[str, Any]) -> bool:
    """A pod in phase Running whose Ready condition is not True (its node may be lost)."""
    status = pod.get("status", {})
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") != "True" for c in status.get("conditions", [])
    )


def node_trouble(node: dict[str, Any]) -> tuple[float, str] | None:
    """(since when, why) the node is unreachable, or None when it is fine."""
    ready: dict[str, Any] = next(
        (c for c in node.get("status", {}).get("conditions", []) if c.get("type") == "Ready"), {}
    )
    taints = [
        t for t in node.get("spec", {}).get("taints") or [] if t.get("key") in UNREACHABLE_TAINTS
    ]
    if ready.get("status") == "True" and not taints:
        return None
    times = [_ts(ready.get("lastTransitionTime")) if ready.get("status") != "True" else None]
    times += [_ts(t.get("timeAdded")) for t in taints]
    since = min((t for t in times if t is not None), default=time.time())
    why = (
        f"Ready={ready.get('status', '?')}: {ready.get('message') or ready.get('reason') or ''}"
        if ready.get("status") != "True"
        else f"tainted {taints[0]['key']}"
    )
    return since, why.strip()


def _lost_node_state(
    pods: list[dict[str, Any]],
    nodes: dict[str, dict[str, Any]],
    started: float | None,
    lost_grace: float,
) -> BackendState | None:
    """A running pod on an unreachable node: NodeUnreachable, and past ``lost_grace`` (how
    long a pod's node may be unreachable before the job is declared lost; GKE's own
    node-monitor grace is 40 s, and a node that comes back within it keeps its pods)
    NodeLost."""
    for pod in pods:
        name = pod.get("spec", {}).get("nodeName")
        node = nodes.get(name or "")
        if node is None or not pod_not_ready(pod):
            continue
        trouble = node_trouble(node)
        if trouble is None:
            continue
        since, why = trouble
        stamp = datetime.fromtimestamp(since).astimezone().isoformat(timespec="seconds")
        message = f"node {name} unreachable since {stamp} ({why})"
        if time.time() - since > lost_grace:
            return BackendState(
                "gone",
                reason=Reason.NODE_LOST,
                message=f"{message}; the pod's process is presumed dead",
                started_at=started,
            )
        return BackendState(
            "running", reason=Reason.NODE_UNREACHABLE, message=message, started_at=started
        )
    return None


# Pod status reasons a kubelet or controller sets when it stops a pod from outside: a
# spot/preemptible node reclaimed (graceful node shutdown: "Terminated"; "Shutdown" and
# "NodeShutdown" in other versions), an eviction, a node lost. Servers before 1.26 set no
# DisruptionTarget condition (the test cluster runs 1.20), so these are read as well.
DISRUPTED_REASONS = frozenset({"Evicted", "Terminated", "Shutdown", "NodeShutdown", "NodeLost"})


def disrupted(pod_status: dict[str, Any]) -> str | None:
    """Why the pod was stopped from outside (preempted, evicted, its node shut down or
    lost), or None when nothing but its own process ended it."""
    for cond in pod_status.get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            words = [w for w in (cond.get("reason"), cond.get("message")) if w]
            return ": ".join(words) or "the pod was disrupted (DisruptionTarget)"
    if pod_status.get("reason") in DISRUPTED_REASONS:
        return f"{pod_status['reason']}: " + (
            pod_status.get("message") or "the pod was stopped from outside its process"
        )
    return None


def kinetic_container_status(pod_status: dict[str, Any]) -> dict[str, Any]:
    """The status of the container that runs the job (sidecars' do not count); the
    kubelet lists containers by name, so position says nothing."""
    statuses = pod_status.get("containerStatuses") or []
    for status in statuses:
        if status.get("name") == KINETIC_CONTAINER:
            return dict(status)
    return dict(statuses[0]) if len(statuses) == 1 else {}


def alive(pod: dict[str, Any]) -> bool:
    """The job's process in the pod may still run: the pod has not reported Succeeded or
    Failed, nor its kinetic container terminated (a sidecar may run on). A pod being
    deleted is alive until its grace period ends (its process may be checkpointing)."""
    status = pod.get("status", {})
    if status.get("phase") in ("Succeeded", "Failed"):
        return False
    return not kinetic_container_status(status).get("state", {}).get("terminated")


def leaving(pod: dict[str, Any]) -> bool:
    """A pod that ended while being deleted (not disrupted): what happens to it next is its
    final delete (the kubelet's, once its containers stopped), so it reads as already
    gone. Read as it stands, a pod deleted gracefully would make its job ``Error`` (the
    exit of the SIGTERM that the deletion sent) for the moment before that delete, where
    every read after it says the job lost its process (``Lost``, recoverable); a reader
    woken by the pod's last event reads exactly that moment."""
    if alive(pod) or not pod.get("metadata", {}).get("deletionTimestamp"):
        return False
    return disrupted(pod.get("status", {})) is None


def refused(pod: dict[str, Any]) -> bool:
    """A pod whose runner would not run the function (another process of the job ran it:
    this pod replaced a deleted one). It says nothing about how the job ended."""
    terminated = kinetic_container_status(pod.get("status", {})).get("state", {}).get("terminated")
    return bool(terminated) and terminated.get("exitCode") == REFUSED_EXIT_CODE


def _created(pod: dict[str, Any]) -> str:
    return str(pod["metadata"].get("creationTimestamp", ""))


def job_state(
    job: dict[str, Any] | None,
    pods: list[dict[str, Any]],
    nodes: dict[str, dict[str, Any]] | None = None,
    lost_grace: float = DEFAULT_LOST_GRACE,
) -> BackendState:
    """Translate a Job and its pods (and the Nodes of pods that stopped being Ready) into a
    BackendState with a reason a person can act on (a pod whose node has been unreachable
    for ``lost_grace`` seconds is presumed dead).

    Every pod carrying the job's label counts, whether or not its Job still exists: while
    one may still run the job's process the job is pending or running (never ended, never
    lost), so nothing starts another run beside it. Of the pods that ended, one that
    refused to run the function again says nothing about the job, and one that ended while
    being deleted counts as gone (``leaving``)."""
    live = sorted((p for p in pods if alive(p)), key=_created)
    if live:
        return _live_state(job, live, nodes or {}, lost_grace)
    pods = [p for p in pods if not leaving(p)]
    ended = [p for p in pods if not refused(p)]
    if job is None:
        return BackendState(
            "not_found",
            message="the Kubernetes Job does not exist (deleted, or expired by its TTL)",
        )
    if pods and not ended:
        return BackendState(
            "gone",
            started_at=_ts(job.get("status", {}).get("startTime")),
            message="the pod that ran the job's function was deleted and its replacement "
            "pod refused to run the function more than once",
        )
    pod = max(ended, key=_created) if ended else None
    return _ended_state(job, pod)


def _live_state(
    job: dict[str, Any] | None,
    live: list[dict[str, Any]],
    nodes: dict[str, dict[str, Any]],
    lost_grace: float,
) -> BackendState:
    """The job while a pod of it may still run: the oldest such pod (the one that may run
    the function) speaks, unless its node is lost."""
    started = _ts((job or {}).get("status", {}).get("startTime"))
    troubled = [(p, _lost_node_state([p], nodes, started, lost_grace)) for p in live]
    fine = [p for p, trouble in troubled if trouble is None]
    if not fine:  # unreachable while one is in its grace; presumed dead (gone) once all are past it
        states = [trouble for _, trouble in troubled if trouble is not None]
        return next((t for t in states if t.phase == "running"), states[0])
    pod = fine[0]
    pod_status = pod.get("status", {})
    cstatus = kinetic_container_status(pod_status)
    waiting = cstatus.get("state", {}).get("waiting") or {}
    name = pod["metadata"].get("name", "?")
    reason, message = None, None
    if job is None:
        reason = Reason.JOB_DELETED
        message = f"the Kubernetes Job was deleted but its pod {name} still runs"
    if pod["metadata"].get("deletionTimestamp"):
        reason = Reason.TERMINATING
        message = f"pod {name} is being deleted; its process may still be saving its work"
    if pod_status.get("phase") == "Running":
        running_since = cstatus.get("state", {}).get("running", {}).get("startedAt")
        return BackendState(
            "running", reason=reason, message=message, started_at=_ts(running_since) or started
        )
    if reason is not None:
        return BackendState("pending", reason=reason, message=message, started_at=started)
    if waiting.get("reason") in ("ImagePullBackOff", "ErrImagePull", "InvalidImageName"):
        return BackendState(
            "pending", reason=Reason.IMAGE_PULL_BACK_OFF, message=waiting.get("message")
        )
    missing = _missing_secret(job, pod, waiting) if job is not None else None
    if missing is not None:
        return missing
    if waiting.get("reason"):
        return BackendState("pending", reason=waiting["reason"], message=waiting.get("message"))
    for cond in pod_status.get("conditions", []):
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return BackendState(
                "pending",
                reason=cond.get("reason") or Reason.UNSCHEDULABLE,
                message=cond.get("message"),
            )
    return BackendState("pending", started_at=started)


def _ended_state(job: dict[str, Any], pod: dict[str, Any] | None) -> BackendState:
    """The job once no pod of it runs: its conditions and its last pod's end."""
    status = job.get("status", {})
    pod_status = (pod or {}).get("status", {})
    started = _ts(status.get("startTime"))
    cstatus = kinetic_container_status(pod_status)
    terminated = cstatus.get("state", {}).get("terminated") or {}
    exit_code = terminated.get("exitCode")
    conditions = {c["type"]: c for c in status.get("conditions", []) if c.get("status") == "True"}
    finished = _ts(status.get("completionTime")) or _ts(terminated.get("finishedAt"))

    exited = partial(BackendState, "exited", started_at=started, finished_at=finished)
    deleting = bool(job.get("metadata", {}).get("deletionTimestamp"))
    being_deleted = partial(
        BackendState, "not_found", message="the Kubernetes Job is being deleted"
    )
    disruption = disrupted(pod_status)
    if disruption is not None:
        return exited(exit_code=exit_code, reason=Reason.PREEMPTED, message=disruption)
    if "Complete" in conditions:
        return exited(exit_code=0, reason=Reason.COMPLETED)
    if "Failed" in conditions:
        cond = conditions["Failed"]
        if cond.get("reason") == "DeadlineExceeded":
            message = cond.get("message") or "activeDeadlineSeconds exceeded"
            return exited(exit_code=exit_code, reason=Reason.DEADLINE_EXCEEDED, message=message)
        if pod is None:  # someone deletes the Job (issue 25), or its node took the pod
            return (
                being_deleted()
                if deleting
                else exited(reason=Reason.PREEMPTED, message=_vanished(cond))
            )
        return _terminated_state(terminated, started, finished, cond.get("message"))
    if terminated:
        return _terminated_state(terminated, started, finished, None)
    if deleting:  # no pod left, none to come
        return being_deleted()
    return BackendState("pending", started_at=started)  # the Job controller makes its pod


def _vanished(failed: dict[str, Any]) -> str:
    """Why a failed Job without a pod was preempted. Nothing but the node's going removes
    a failed pod while its Job lives: a reclaimed spot VM (or a node the autoscaler
    removed) takes its pods with it, the pod GC deleting them, and the Job controller
    has counted them failed (GKE's counts a removed pod as failed by itself). A user's
    deletion of the Job shows as its deletionTimestamp (not_found once its pods are
    gone); a runner that recorded its end in storage is decided by that record."""
    why = ": ".join(w for w in (failed.get("reason"), failed.get("message")) if w)
    return (
        f"the Job failed ({why or 'Failed'}) and its pod is gone: removed with its node "
        "(a spot VM reclaimed, or the node removed by the autoscaler) before its end "
        "was read"
    )


def _missing_secret(
    job: dict[str, Any], pod: dict[str, Any] | None, waiting: dict[str, Any]
) -> BackendState | None:
    """The pod waits for the job's own signing-key Secret, which someone deleted (kinetic
    creates it before the Job, so it existed when the pod was made). A kubelet waits for
    ever; after ``SECRET_MISSING_GRACE`` (a kubelet's cache may lag) the job ends with
    reason ``SecretMissing``: the pod never started, and the runner refuses to run a job
    whose outcome is decided, should the Secret come back. Before that: pending."""
    name = job.get("metadata", {}).get("name", "")
    if (
        pod is None
        or waiting.get("reason") != "CreateContainerConfigError"
        or f'secret "{name}" not found' not in (waiting.get("message") or "")
    ):
        return None
    since = _ts(pod["metadata"].get("creationTimestamp")) or time.time()
    message = (
        f"the job's signing-key Secret {name} was deleted, so its pod cannot start; "
        "resubmit the job (with its idempotency key: a new attempt)"
    )
    if time.time() - since > SECRET_MISSING_GRACE:
        return BackendState("exited", reason=Reason.SECRET_MISSING, message=message)
    return BackendState("pending", reason=Reason.SECRET_MISSING, message=message)


def _terminated_state(
    terminated: dict[str, Any], started: float | None, finished: float | None, fallback: str | None
) -> BackendState:
    code = terminated.get("exitCode")
    reason = terminated.get("reason")
    if reason == "OOMKilled":
        return BackendState(
            "exited",
            exit_code=code,
            reason=Reason.OOM_KILLED,
            started_at=started,
            finished_at=finished,
            message="the container exceeded its memory limit; raise resources['memory']",
        )
    if code == 0 and reason in (None, "Completed"):
        return BackendState(
            "exited",
            exit_code=0,
            reason=Reason.COMPLETED,
            started_at=started,
            finished_at=finished,
        )
    message = terminated.get("message") or fallback or f"container exited with code {code}"
    return BackendState(
        "exited",
        exit_code=code,
        reason=Reason.ERROR,
        started_at=started,
        finished_at=finished,
        message=message,
    )
