"""What a Job and its pods mean: ``job_state`` turns them into a BackendState whose reason a
person can act on (Unschedulable, ImagePullBackOff, OOMKilled, DeadlineExceeded, Preempted)."""

from __future__ import annotations

from datetime import datetime
from functools import partial
from typing import Any

from kinetic_core.backends import BackendState
from kinetic_core.backends.kubernetes.pod_spec import KINETIC_CONTAINER


def _ts(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def kinetic_container_status(pod_status: dict[str, Any]) -> dict[str, Any]:
    """The status of the container that runs the job (sidecars' do not count); the
    kubelet lists containers by name, so position says nothing."""
    statuses = pod_status.get("containerStatuses") or []
    for status in statuses:
        if status.get("name") == KINETIC_CONTAINER:
            return dict(status)
    return dict(statuses[0]) if len(statuses) == 1 else {}


def job_state(job: dict[str, Any] | None, pods: list[dict[str, Any]]) -> BackendState:
    """Translate a Job and its pods into a BackendState with a reason a person can act on."""
    if job is None:
        return BackendState(
            "not_found",
            message="the Kubernetes Job does not exist (deleted, or expired by its TTL)",
        )
    status = job.get("status", {})
    pod = max(pods, key=lambda p: p["metadata"].get("creationTimestamp", "")) if pods else None
    pod_status = (pod or {}).get("status", {})
    started = _ts(status.get("startTime"))
    cstatus = kinetic_container_status(pod_status)
    terminated = cstatus.get("state", {}).get("terminated") or {}
    waiting = cstatus.get("state", {}).get("waiting") or {}
    exit_code = terminated.get("exitCode")
    conditions = {c["type"]: c for c in status.get("conditions", []) if c.get("status") == "True"}
    finished = _ts(status.get("completionTime")) or _ts(terminated.get("finishedAt"))

    evicted = pod_status.get("reason") == "Evicted" or any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        for c in pod_status.get("conditions", [])
    )
    exited = partial(BackendState, "exited", started_at=started, finished_at=finished)
    if evicted:
        message = pod_status.get("message") or "the pod was evicted or preempted"
        return exited(exit_code=exit_code, reason="Preempted", message=message)
    if "Complete" in conditions:
        return exited(exit_code=0, reason="Completed")
    if "Failed" in conditions:
        cond = conditions["Failed"]
        if cond.get("reason") == "DeadlineExceeded":
            message = cond.get("message") or "activeDeadlineSeconds exceeded"
            return exited(exit_code=exit_code, reason="DeadlineExceeded", message=message)
        return _terminated_state(terminated, started, finished, cond.get("message"))
    if terminated:
        return _terminated_state(terminated, started, finished, None)
    if pod_status.get("phase") == "Running":
        return BackendState(
            "running",
            started_at=_ts(cstatus.get("state", {}).get("running", {}).get("startedAt")) or started,
        )
    if waiting.get("reason") in ("ImagePullBackOff", "ErrImagePull", "InvalidImageName"):
        return BackendState("pending", reason="ImagePullBackOff", message=waiting.get("message"))
    if waiting.get("reason"):
        return BackendState("pending", reason=waiting["reason"], message=waiting.get("message"))
    for cond in pod_status.get("conditions", []):
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return BackendState(
                "pending", reason=cond.get("reason") or "Unschedulable", message=cond.get("message")
            )
    return BackendState("pending", started_at=started)


def _terminated_state(
    terminated: dict[str, Any], started: float | None, finished: float | None, fallback: str | None
) -> BackendState:
    code = terminated.get("exitCode")
    reason = terminated.get("reason")
    if reason == "OOMKilled":
        return BackendState(
            "exited",
            exit_code=code,
            reason="OOMKilled",
            started_at=started,
            finished_at=finished,
            message="the container exceeded its memory limit; raise resources['memory']",
        )
    if code == 0 and reason in (None, "Completed"):
        return BackendState(
            "exited", exit_code=0, reason="Completed", started_at=started, finished_at=finished
        )
    message = terminated.get("message") or fallback or f"container exited with code {code}"
    return BackendState(
        "exited",
        exit_code=code,
        reason="Error",
        started_at=started,
        finished_at=finished,
        message=message,
    )
