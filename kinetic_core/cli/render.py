"""How the CLI shows things: rich tables for people, JSON for scripts, hints on stderr."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import click
from rich.cells import cell_len
from rich.console import Console, JustifyMethod
from rich.markup import escape
from rich.table import Table
from rich.text import Text

import kinetic_core as kc
from kinetic_core.util.words import plural

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


@dataclass(frozen=True)
class Column:
    """A column of a table that must fit the terminal. ``drop`` orders what goes when the
    table does not fit (0: never; the highest number goes first); a ``wrap`` column holds
    free text wrapped at spaces, every other column keeps each cell whole on one line."""

    header: str
    drop: int = 0
    wrap: bool = False
    justify: JustifyMethod = "left"
    #: Free text kept to one line: as wide as the table leaves it (at least ``CUT_LEAST``
    #: cells), the rest cut with "…" (the whole text: ``jobs status`` or ``--json``).
    cut: bool = False


#: The narrowest a ``cut`` column gets before it is dropped.
CUT_LEAST = 16


#: A word longer than this in free text is cut with an ellipsis, so one long path or
#: token cannot force its column out of a narrow terminal.
WORD = 40


def fit_table(
    title: str, columns: list[Column], rows: list[list[str]], *, width: int | None = None
) -> Table:
    """A table no wider than ``width`` (the terminal's) in which no cell's word is broken:
    columns are dropped by their ``drop`` order until the rest fit, and each column gets an
    explicit width (rich would fold words to squeeze a table that is a cell too wide)."""
    width = width or console().width
    shown = list(range(len(columns)))
    widths = _widths([columns[i] for i in shown], rows, shown, width)
    while widths is None:
        droppable = [i for i in shown if columns[i].drop]
        if not droppable:  # a terminal narrower than an id: rich folds what it must
            widths = [None] * len(shown)
            break
        shown.remove(max(droppable, key=lambda i: columns[i].drop))
        widths = _widths([columns[i] for i in shown], rows, shown, width)
    table = Table(title=title)
    for i, cells in zip(shown, widths, strict=True):
        col = columns[i]
        table.add_column(
            col.header,
            justify=col.justify,
            no_wrap=not col.wrap,
            width=cells,
            overflow="ellipsis" if col.cut else "fold",
        )
    for row in rows:
        table.add_row(*(row[i] for i in shown))
    return table


def _widths(
    columns: list[Column], rows: list[list[str]], shown: list[int], width: int
) -> list[int | None] | None:
    """Each column's width, or None when the columns do not fit ``width`` with every
    one-line cell whole and every word of free text on one line."""
    need: list[int] = []
    full: list[int] = []
    for col, i in zip(columns, shown, strict=True):
        texts = [col.header, *(Text.from_markup(row[i]).plain for row in rows)]
        longest = max(cell_len(line) for t in texts for line in t.splitlines() or [""])
        words = [cell_len(w) for t in texts for w in t.split()] or [0]
        need.append(max(words) if col.wrap else min(longest, CUT_LEAST) if col.cut else longest)
        full.append(longest)
    spare = width - sum(need) - 3 * len(columns) - 1  # borders and padding of a rich Table
    if spare < 0:
        return None
    widths: list[int | None] = []
    for col, least, most in zip(columns, need, full, strict=True):
        extra = min(spare, most - least) if col.wrap or col.cut else 0
        spare -= extra
        widths.append(least + extra)
    return widths


def words_cut(text: str, word: int = WORD) -> str:
    """Free text for a wrapping column: every word longer than ``word`` cut with "…"."""
    return " ".join(w if len(w) <= word else w[: word - 1] + "…" for w in text.split())


def one_line(text: str | None) -> str:
    """Free text for a ``cut`` column: its lines joined into one (escaped: user text is
    never read as rich markup); the column cuts it with "…" where it is too long."""
    return escape(" ".join((text or "").split()))


def ago(dt: datetime | None, now: datetime | None = None) -> str:
    """``42s ago``, ``20m ago``, ``2h 5m ago``, ``3d 4h ago``: when, for people."""
    if dt is None:
        return "-"
    now = now or datetime.now(dt.tzinfo)
    seconds = max(0, round((now - dt).total_seconds()))
    if seconds >= 86400:
        days, rest = divmod(seconds, 86400)
        return f"{days}d {rest // 3600}h ago"
    if seconds >= 3600:
        return f"{seconds_text(seconds)} ago"
    return f"{seconds // 60}m ago" if seconds >= 60 else f"{seconds}s ago"


def ran(state: kc.JobState) -> str:
    """How long the job has run (to its end, or to now while it runs)."""
    if state.started_at is None:
        return "-"
    end = state.finished_at or datetime.now(state.started_at.tzinfo)
    return seconds_text((end - state.started_at).total_seconds())


#: ``jobs list``: what an 80-column terminal shows is the id, the status with its reason
#: (``FAILED DeadlineExceeded``, wrapped at the space when narrow: a FAILED job's reason is
#: never dropped), when created and how long it ran (ids shorter than the longest show
#: more); wider terminals show more.
JOB_COLUMNS = [
    Column("job id"),
    Column("status", wrap=True),
    Column("created", drop=1),
    Column("ran", drop=3, justify="right"),
    Column("attempt", drop=4, justify="right"),
    Column("message", drop=5, cut=True),
    Column("name", drop=6),
    Column("owner", drop=7),
    Column("description", drop=8, wrap=True),
    Column("finished", drop=9),
]


def state_table(
    title: str, rows: list[tuple[kc.JobHandle, kc.JobState]], *, width: int | None = None
) -> Table:
    """Jobs with their states, as many columns as the terminal holds (JOB_COLUMNS); the
    ``owner`` and ``description`` columns only when any job has one (the description's
    first line, shortened)."""
    unused = {c for c in ("owner", "description") if not any(getattr(h, c) for h, _ in rows)}
    columns = [c for c in JOB_COLUMNS if c.header not in unused]
    cells = [
        {
            "job id": handle.job_id,
            "status": styled(state.status.value)
            + (f" {escape(state.reason)}" if state.reason else ""),
            "created": ago(state.created_at),
            "ran": ran(state),
            "attempt": str(state.attempt),
            "message": one_line(state.message),
            "name": escape(handle.name),
            "owner": escape(handle.owner),
            "description": short(handle.description),  # its words are at most 40 cells
            "finished": ago(state.finished_at) if state.finished_at else "",
        }
        for handle, state in rows
    ]
    return fit_table(
        title, columns, [[c[col.header] for col in columns] for c in cells], width=width
    )


def job_details(handle: kc.JobHandle, state: kc.JobState) -> Table:
    """``jobs status``: one field a line (fits any terminal; long text wraps at spaces)."""
    fields = [
        ("job id", handle.job_id),
        ("name", escape(handle.name)),
        (
            "status",
            styled(state.status.value) + (f" ({escape(state.reason)})" if state.reason else ""),
        ),
        ("attempt", str(state.attempt)),
        ("owner", escape(handle.owner)),
        ("created", f"{_fmt(state.created_at)} ({ago(state.created_at)})"),
        ("ran", ran(state)),
        (
            "finished",
            f"{_fmt(state.finished_at)} ({ago(state.finished_at)})" if state.finished_at else "",
        ),
        ("exit code", "" if state.exit_code is None else str(state.exit_code)),
        ("message", escape(state.message or "")),
        ("description", escape(handle.description)),
    ]
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in fields:
        if value:
            table.add_row(key, value)
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


HISTORY_COLUMNS = [
    Column("attempt", justify="right"),
    Column("status"),
    Column("reason", drop=2),
    Column("since", drop=1),
    Column("for", drop=3, justify="right"),
    Column("exit", drop=4, justify="right"),
    Column("message", drop=5, cut=True),
]


def history_table(
    title: str, transitions: list[kc.Transition], *, width: int | None = None
) -> Table:
    rows = [
        [
            str(t.attempt),
            styled(t.status.value),
            escape(t.reason or ""),
            ago(t.at),
            seconds_text(t.duration) if t.duration is not None else "",
            "" if t.exit_code is None else str(t.exit_code),
            one_line(t.message),
        ]
        for t in transitions
    ]
    return fit_table(title, HISTORY_COLUMNS, rows, width=width)


def counts_text(counts: dict[kc.ChildStatus, int]) -> str:
    """``SUCCEEDED=3, RUNNING=2``: wraps between statuses, never inside one."""
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


BATCH_COLUMNS = [
    Column("group id"),
    Column("total", justify="right"),
    Column("counts", wrap=True),
    Column("name", drop=3),
    Column("submitted", drop=1),
    Column("cancel", drop=2),
]


def batches_table(summaries: list[dict[str, Any]], *, width: int | None = None) -> Table:
    """``batch list``: the group id, how many inputs and their counts always; the name
    and the submission and cancel flags as the terminal's width allows."""
    rows = [
        [
            s["group_id"],
            str(s["total"]),
            counts_text(s["counts"]),
            escape(s["name"]),
            "yes" if s["submission_complete"] else "no",
            "yes" if s["cancel_requested"] else "",
        ]
        for s in summaries
    ]
    return fit_table(plural(len(summaries), "batch", "batches"), BATCH_COLUMNS, rows, width=width)


def status_heading(summary: dict[str, Any]) -> str:
    """``batch GROUP (name): N inputs, submission complete[, cancel requested]``."""
    flags = [
        "submission complete" if summary["submission_complete"] else "still submitting",
        *(["cancel requested"] if summary["cancel_requested"] else []),
    ]
    return (
        f"[bold]batch {summary['group_id']}[/] ({summary['name']}): "
        f"{plural(summary['total'], 'input')}, {', '.join(flags)}"
    )


def status_table(counts: dict[kc.ChildStatus, int]) -> Table:
    """One row per status with how many inputs are in it."""
    table = Table()
    table.add_column("status")
    table.add_column("inputs", justify="right")
    for status, n in sorted(counts.items()):
        table.add_row(styled(status.value), str(n))
    return table


FAILED_CHILD_COLUMNS = [
    Column("input", justify="right"),
    Column("job id"),
    Column("status"),
    Column("reason", drop=1),
    Column("message", drop=2, cut=True),
]


def failed_children_table(children: list[kc.FailedChild], *, width: int | None = None) -> Table:
    rows = []
    for child in children:
        message = child.state.message if child.state else str(child.error or "")
        rows.append(
            [
                str(child.index),
                child.job.job_id if child.job else "-",
                styled(child.status.value),
                escape(child.reason),
                one_line(message),
            ]
        )
    return fit_table(
        f"{plural(len(children), 'input')} did not succeed", FAILED_CHILD_COLUMNS, rows, width=width
    )


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
