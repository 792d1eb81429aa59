"""Markdown/table renderings of Kinetic jobs and batches for Prefect artifacts."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import kinetic_core as kc


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _at(value: datetime | None) -> str:
    return value.isoformat(timespec="seconds") if value else ""


def job_markdown(
    handle: kc.JobHandle, state: kc.JobState, transitions: list[kc.Transition] | None = None
) -> str:
    """Job id, target and final state, with a table of the job's state history (the
    recorded ``transitions`` across recovered attempts when given)."""
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
        f"Inspect: `kinetic jobs status {handle.job_id}`, `kinetic jobs logs {handle.job_id}`; "
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
