"""How the CLI shows things: rich tables for people, JSON for scripts, hints on stderr."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import kinetic_core as kc

STATUS_STYLE = {
    "SUCCEEDED": "green",
    "FAILED": "red",
    "CANCELLED": "yellow",
    "RUNNING": "cyan",
    "PENDING": "blue",
    "SUBMIT_FAILED": "red",
    "UNSUBMITTED": "dim",
}


def console(*, stderr: bool = False) -> Console:
    return Console(stderr=stderr)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


def hint(message: str) -> None:
    click.echo(message, err=True)


def styled(status: str) -> str:
    return f"[{STATUS_STYLE.get(status, '')}]{status}[/]"


def _fmt(dt: datetime | None) -> str:
    return dt.strftime("%Y-%m-%d %H:%M:%S") if dt else "-"


def state_table(
    title: str, rows: list[tuple[kc.JobHandle, kc.JobState]], *, description: bool = True
) -> Table:
    """Jobs with their states; ``owner`` and ``description`` columns when any job has one
    (the description's first line, shortened; ``jobs status`` prints it whole instead)."""
    columns = ["name", "status", "reason", "attempt", "created", "finished", "message"]
    shown = ("owner", "description") if description else ("owner",)
    extra = [c for c in shown if any(getattr(h, c) for h, _ in rows)]
    table = Table(title=title)
    table.add_column("job id", no_wrap=True)
    for col in [*columns[:2], *extra, *columns[2:]]:
        table.add_column(col, overflow="fold")
    for handle, state in rows:
        about = {"owner": escape(handle.owner), "description": short(handle.description)}
        table.add_row(
            handle.job_id,
            handle.name,
            styled(state.status.value),
            *[about[c] for c in extra],
            state.reason or "",
            str(state.attempt),
            _fmt(state.created_at),
            _fmt(state.finished_at),
            (state.message or "")[:120],
        )
    return table


DESCRIPTION_COLUMN = 40


def short(text: str, width: int = DESCRIPTION_COLUMN) -> str:
    """The first line of ``text``, cut to ``width`` characters with an ellipsis (escaped:
    user text is never read as rich markup)."""
    lines = text.strip().splitlines() or [""]
    first = lines[0]
    if len(first) > width:
        first = first[: width - 1] + "…"
    elif len(lines) > 1:
        first += " …"
    return escape(first)


def description_text(handle: kc.JobHandle) -> str:
    """``jobs status``: the whole description under the table."""
    return f"[bold]description:[/] {escape(handle.description)}"


def seconds_text(seconds: float | None) -> str:
    """``42s``, ``20m 3s``, ``2h 5m``: how long, for people."""
    if seconds is None:
        return "-"
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {secs}s" if minutes else f"{secs}s"


def history_table(title: str, transitions: list[kc.Transition]) -> Table:
    table = Table(title=title)
    for col in ("attempt", "status", "reason", "since", "for", "exit", "message"):
        table.add_column(col, overflow="fold")
    for t in transitions:
        table.add_row(
            str(t.attempt),
            styled(t.status.value),
            t.reason or "",
            _fmt(t.at),
            seconds_text(t.duration) if t.duration is not None else "",
            "" if t.exit_code is None else str(t.exit_code),
            (t.message or "")[:120],
        )
    return table


def counts_text(counts: dict[kc.ChildStatus, int]) -> str:
    return ", ".join(f"{styled(s.value)}={n}" for s, n in sorted(counts.items()))


def batch_summary(batch: kc.BatchHandle) -> dict[str, Any]:
    """What ``batch status --json`` and ``batch list --json`` print per batch."""
    return {
        "group_id": batch.group_id,
        "name": batch.name,
        "total": batch.total,
        "submission_complete": batch.submission_complete,
        "cancel_requested": batch.cancel_requested,
        "counts": batch.status_counts(),
    }


def batches_table(summaries: list[dict[str, Any]]) -> Table:
    table = Table(title=f"{len(summaries)} batches")
    for col in ("group id", "name", "total", "counts", "submitted", "cancel"):
        table.add_column(col)
    for s in summaries:
        table.add_row(
            s["group_id"],
            s["name"],
            str(s["total"]),
            counts_text(s["counts"]),
            "yes" if s["submission_complete"] else "no",
            "yes" if s["cancel_requested"] else "",
        )
    return table


def status_heading(summary: dict[str, Any]) -> str:
    """``batch GROUP (name): N inputs, submission complete[, cancel requested]``."""
    flags = [
        "submission complete" if summary["submission_complete"] else "still submitting",
        *(["cancel requested"] if summary["cancel_requested"] else []),
    ]
    return (
        f"[bold]batch {summary['group_id']}[/] ({summary['name']}): "
        f"{summary['total']} inputs, {', '.join(flags)}"
    )


def status_table(counts: dict[kc.ChildStatus, int]) -> Table:
    """One row per status with how many inputs are in it."""
    table = Table()
    table.add_column("status")
    table.add_column("inputs", justify="right")
    for status, n in sorted(counts.items()):
        table.add_row(styled(status.value), str(n))
    return table


def failed_children_table(children: list[kc.FailedChild]) -> Table:
    table = Table(title=f"{len(children)} inputs did not succeed")
    table.add_column("input", justify="right")
    table.add_column("job id", no_wrap=True)
    for col in ("status", "reason", "message"):
        table.add_column(col, overflow="fold")
    for child in children:
        message = child.state.message if child.state else str(child.error or "")
        table.add_row(
            str(child.index),
            child.job.job_id if child.job else "-",
            styled(child.status.value),
            child.reason,
            (message or "")[:200],
        )
    return table


def failed_child_line(child: kc.FailedChild) -> str:
    """One plain line per input that did not succeed (for stderr)."""
    if child.job is None:
        return f"  input {child.index}: not submitted: {child.reason}: {child.error}"
    state = child.state
    return (
        f"  input {child.index}: {child.job.job_id}: {child.status.value} "
        f"{child.reason}: {state.message if state else ''}"
    )


def json_line(job_id: str, line: str) -> str:
    """One followed log line as a JSON object on one line."""
    return json.dumps({"job_id": job_id, "line": line})
