"""Markdown/table renderings of Kinetic jobs and batches for Prefect artifacts."""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any

import kinetic_core as kc

log = logging.getLogger(__name__)


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _at(value: datetime | None) -> str:
    return value.isoformat(timespec="seconds") if value else ""


def usage_markdown(usage: kc.Usage | None) -> str:
    """The job's usage per attempt (chips, queued and running time, chip-hours, how it
    ended, lost or not, cost) and its totals; '' when it could not be read."""
    if usage is None:
        return ""
    rows = "\n".join(
        f"| {a.attempt} | {_cell(a.accelerator or 'CPU only')}{' (spot)' if a.spot else ''} "
        f"| {a.chips} | {a.hosts} | {a.queued_seconds:.0f}s | {a.running_seconds:.0f}s "
        f"| {a.chip_hours:.2f} | {_cell(a.status)}{f' ({_cell(a.reason)})' if a.reason else ''} "
        f"| {'yes' if a.lost else ''} | {'' if a.cost is None else f'{a.cost:.2f}'} |"
        for a in usage.attempts
    )
    return (
        "#### Usage\n\n"
        "| attempt | accelerator | chips | hosts | queued | ran | chip-hours | ended | lost "
        "| cost |\n|---|---|---|---|---|---|---|---|---|---|\n"
        f"{rows}\n\n{_cell(usage.describe())}\n\n"
    )


def _usage_of(handle: kc.JobHandle) -> kc.Usage | None:
    try:
        return handle.usage()
    except (kc.KineticError, OSError) as exc:  # observability never fails the task
        log.warning("Cannot read the usage of kinetic job %s: %s", handle.job_id, exc)
        return None


def job_markdown(
    handle: kc.JobHandle,
    state: kc.JobState,
    transitions: list[kc.Transition] | None = None,
    usage: kc.Usage | None = None,
) -> str:
    """Job id, target and final state, with a table of the job's state history (the
    recorded ``transitions`` across recovered attempts when given) and of what its
    attempts used (``usage``, else read from the job)."""
    history: list[tuple[int, str, datetime | None, str | None, str | None]]
    if transitions:
        history = [(t.attempt, t.status.value, t.at, t.reason, t.message) for t in transitions]
    else:
        history = [(state.attempt, "PENDING", state.created_at, "submitted", "")]
        if state.started_at:
            history.append((state.attempt, "RUNNING", state.started_at, "", ""))
        if state.terminal:
            history.append(
                (state.attempt, state.status.value, state.finished_at, state.reason, state.message)
            )
    rows = "\n".join(
        f"| {attempt} | {_cell(status)} | {_at(at)} | {_cell(reason)} | {_cell(message)} |"
        for attempt, status, at, reason, message in history
    )
    target = json.dumps(handle.target, sort_keys=True)
    return (
        f"### Kinetic job `{handle.job_id}`\n\n"
        f"| | |\n|---|---|\n"
        f"| job id | `{handle.job_id}` |\n"
        f"| attempt | {handle.attempt}{' (reattached)' if handle.reattached else ''} |\n"
        f"| final state | **{state.status.value}**{f' ({_cell(state.reason)})' if state.reason else ''} |\n"
        f"| exit code | {_cell(state.exit_code)} |\n"
        f"| recoveries | {state.recoveries}{f' ({_cell(state.recovery_note)})' if state.recoveries else ''} |\n"
        f"| location | `{_cell(handle.location)}` |\n"
        f"| target | `{_cell(target)}` |\n"
        f"| idempotency key | `{_cell(handle.idempotency_key)}` |\n\n"
        f"#### State history\n\n"
        f"| attempt | status | at | reason | message |\n|---|---|---|---|---|\n{rows}\n\n"
        f"{usage_markdown(usage or _usage_of(handle))}"
        f"Inspect: `kinetic jobs status {handle.job_id}`, `kinetic jobs logs {handle.job_id}`, "
        f"`kinetic jobs usage {handle.job_id}`; "
        f"reattach from Python with `kinetic_core.attach({handle.job_id!r})`.\n"
    )


def failure_rows(failed: list[kc.FailedChild]) -> list[dict[str, Any]]:
    """One table row per input that did not succeed."""
    return [
        {
            "index": f.index,
            "job_id": f.job.job_id if f.job else "",
            "status": f.status.value,
            "reason": f.reason,
            "message": f.message[:500],
            "exit_code": f.state.exit_code if f.state else None,
        }
        for f in failed
    ]
