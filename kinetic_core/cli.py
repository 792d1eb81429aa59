"""``kinetic jobs …`` / ``kinetic batch …``: observe and manage jobs from a shell.

Every read command takes ``--json``. Exit codes: 0 ok, 1 the job/batch failed (the
remote error is printed), 2 bad usage or a kinetic error (the message says what to do).
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from datetime import datetime
from typing import Any

from kinetic_core.batch import BatchHandle, attach_batch, list_batches
from kinetic_core.config import Target
from kinetic_core.errors import BatchError, KineticError
from kinetic_core.jobs import JobHandle, attach, list_jobs
from kinetic_core.states import ChildStatus, JobState, JobStatus
from kinetic_core.status import resolve_states

try:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn
    from rich.table import Table
except ImportError:  # pragma: no cover - exercised only without the cli extra
    Console = None  # type: ignore[assignment,misc]

STATUS_STYLE = {
    ChildStatus.SUCCEEDED: "green",
    ChildStatus.FAILED: "red",
    ChildStatus.CANCELLED: "yellow",
    ChildStatus.RUNNING: "cyan",
    ChildStatus.PENDING: "blue",
    ChildStatus.SUBMIT_FAILED: "red",
    ChildStatus.UNSUBMITTED: "dim",
}


def _console() -> Any:
    if Console is None:
        print("The kinetic CLI needs rich: pip install 'kinetic-workflows[cli]'", file=sys.stderr)
        raise SystemExit(2)
    return Console()


def _fmt(dt: datetime | None) -> str:
    return dt.strftime("%Y-%m-%d %H:%M:%S") if dt else "-"


def _target(args: argparse.Namespace) -> Target:
    return Target(storage=args.storage)


def _emit_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str))


def _state_table(title: str, rows: list[tuple[JobHandle, JobState]]) -> Any:
    table = Table(title=title)
    table.add_column("job id", no_wrap=True)
    for col in ("name", "status", "reason", "attempt", "created", "finished", "message"):
        table.add_column(col, overflow="fold")
    for handle, state in rows:
        style = STATUS_STYLE.get(ChildStatus.of(state.status), "")
        table.add_row(
            handle.job_id,
            handle.name,
            f"[{style}]{state.status.value}[/]",
            state.reason or "",
            str(state.attempt),
            _fmt(state.created_at),
            _fmt(state.finished_at),
            (state.message or "")[:120],
        )
    return table


# ---- jobs -----------------------------------------------------------------------------------


def jobs_list(args: argparse.Namespace) -> int:
    tags = dict(t.split("=", 1) for t in args.tag or [])
    handles = list_jobs(
        status=args.status,
        tags=tags or None,
        name=args.name,
        limit=args.limit,
        target=_target(args),
    )
    states = resolve_states(handles) if handles else []
    if args.json:
        _emit_json(
            [{**h.to_dict(), "state": s.to_dict()} for h, s in zip(handles, states, strict=True)]
        )
    else:
        _console().print(
            _state_table(f"{len(handles)} jobs", list(zip(handles, states, strict=True)))
        )
    return 0


def jobs_status(args: argparse.Namespace) -> int:
    handle = attach(args.job_id, target=_target(args))
    state = handle.state()
    if args.json:
        _emit_json({**handle.to_dict(), "state": state.to_dict()})
    else:
        _console().print(_state_table(handle.job_id, [(handle, state)]))
    return 1 if state.status in (JobStatus.FAILED, JobStatus.CANCELLED) else 0


def jobs_logs(args: argparse.Namespace) -> int:
    handle = attach(args.job_id, target=_target(args))
    if args.follow:
        for line in handle.follow_logs():
            print(
                json.dumps({"job_id": handle.job_id, "line": line}) if args.json else line,
                flush=True,
            )
    elif args.json:
        _emit_json({"job_id": handle.job_id, "lines": handle.logs(tail=args.tail).splitlines()})
    else:
        sys.stdout.write(handle.logs(tail=args.tail))
    return 0


def jobs_result(args: argparse.Namespace) -> int:
    handle = attach(args.job_id, target=_target(args))
    try:
        value = handle.result(timeout=args.timeout, cleanup=not args.keep)
    except KineticError:
        raise
    except Exception as exc:  # the remote exception, rebuilt
        print("".join(traceback.format_exception_only(exc)).strip(), file=sys.stderr)
        for note in getattr(exc, "__notes__", []):
            print(note, file=sys.stderr)
        return 1
    if args.json:
        _emit_json({"job_id": handle.job_id, "result": value})
    else:
        _console().print(value)
    return 0


def jobs_cancel(args: argparse.Namespace) -> int:
    handle = attach(args.job_id, target=_target(args))
    cancelled = handle.cancel()
    print(f"{handle.job_id}: {'cancel requested' if cancelled else 'already finished'}")
    return 0


def jobs_cleanup(args: argparse.Namespace) -> int:
    handle = attach(args.job_id, target=_target(args))
    handle.cleanup(outputs=args.outputs)
    print(f"{handle.job_id}: cleaned up")
    return 0


# ---- batch ----------------------------------------------------------------------------------


def _batch_summary(batch: BatchHandle) -> dict[str, Any]:
    return {
        "group_id": batch.group_id,
        "name": batch.name,
        "total": batch.total,
        "submission_complete": batch.submission_complete,
        "cancel_requested": batch.cancel_requested,
        "counts": batch.status_counts(),
    }


def batch_list(args: argparse.Namespace) -> int:
    batches = list_batches(target=_target(args), limit=args.limit)
    summaries = [_batch_summary(b) for b in batches]
    if args.json:
        _emit_json(summaries)
        return 0
    table = Table(title=f"{len(summaries)} batches")
    for col in ("group id", "name", "total", "counts", "submitted", "cancel"):
        table.add_column(col)
    for s in summaries:
        table.add_row(
            s["group_id"],
            s["name"],
            str(s["total"]),
            ", ".join(f"{k}={v}" for k, v in sorted(s["counts"].items())),
            "yes" if s["submission_complete"] else "no",
            "yes" if s["cancel_requested"] else "",
        )
    _console().print(table)
    return 0


def batch_status(args: argparse.Namespace) -> int:
    batch = attach_batch(args.group_id, target=_target(args))
    if args.watch:
        _watch(batch)
    summary = _batch_summary(batch)
    if args.json:
        _emit_json(summary)
    else:
        _console().print(summary)
    bad = any(s.terminal and not s.ok for s in summary["counts"])
    return 1 if bad else 0


def _watch(batch: BatchHandle) -> None:
    """Live progress bar until every child is final."""
    console = _console()
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TextColumn("{task.fields[counts]}"),
        console=console,
        transient=False,
    ) as progress:
        bar = progress.add_task(batch.group_id, total=batch.total, counts="")
        for snapshot in batch.progress():
            progress.update(
                bar,
                completed=snapshot.finished,
                counts=" ".join(
                    f"[{STATUS_STYLE.get(k, '')}]{k.lower()}={v}[/]"
                    for k, v in sorted(snapshot.counts.items())
                ),
            )


def batch_results(args: argparse.Namespace) -> int:
    batch = attach_batch(args.group_id, target=_target(args))
    try:
        values = batch.results(cleanup=not args.keep, timeout=args.timeout)
    except BatchError as exc:
        print(str(exc), file=sys.stderr)
        for job in exc.failures:
            state = job.state()
            print(f"  {job.job_id}: {state.reason}: {state.message}", file=sys.stderr)
        for index, err in exc.submission_failures.items():
            print(f"  input {index}: not submitted: {err}", file=sys.stderr)
        if args.json:
            _emit_json({"group_id": batch.group_id, "partial_results": exc.partial_results})
        return 1
    if args.json:
        _emit_json({"group_id": batch.group_id, "results": values})
    else:
        _console().print(values)
    return 0


def batch_cancel(args: argparse.Namespace) -> int:
    attach_batch(args.group_id, target=_target(args)).cancel()
    print(f"{args.group_id}: cancel requested")
    return 0


def batch_cleanup(args: argparse.Namespace) -> int:
    attach_batch(args.group_id, target=_target(args)).cleanup()
    print(f"{args.group_id}: cleaned up")
    return 0


# ---- parser ---------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kinetic", description="Manage kinetic detached jobs.")
    parser.add_argument(
        "--storage", help="storage root URI (default: KINETIC_STORAGE or file://~/.kinetic)"
    )
    groups = parser.add_subparsers(dest="group", required=True)

    jobs = groups.add_parser("jobs", help="single jobs").add_subparsers(
        dest="command", required=True
    )
    p = jobs.add_parser("list", help="jobs, newest first")
    p.add_argument("--status", choices=[s.value for s in JobStatus])
    p.add_argument("--tag", action="append", metavar="KEY=VALUE")
    p.add_argument("--name")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=jobs_list)
    for name, func, help_text in (
        ("status", jobs_status, "state of one job"),
        ("cancel", jobs_cancel, "cancel a job"),
        ("cleanup", jobs_cleanup, "free a job's resources"),
    ):
        p = jobs.add_parser(name, help=help_text)
        p.add_argument("job_id")
        p.set_defaults(func=func)
        if name == "status":
            p.add_argument("--json", action="store_true")
        if name == "cleanup":
            p.add_argument(
                "--outputs", action="store_true", help="also delete the job's output dir"
            )
    p = jobs.add_parser("logs", help="a job's output")
    p.add_argument("job_id")
    p.add_argument("--tail", type=int, metavar="N")
    p.add_argument("--follow", "-f", action="store_true")
    p.add_argument("--json", action="store_true", help="JSON (one object per line with --follow)")
    p.set_defaults(func=jobs_logs)
    p = jobs.add_parser("result", help="wait for and print a job's result")
    p.add_argument("job_id")
    p.add_argument("--timeout", type=float)
    p.add_argument("--keep", action="store_true", help="do not clean up after collecting")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=jobs_result)

    batch = groups.add_parser("batch", help="batches").add_subparsers(dest="command", required=True)
    p = batch.add_parser("list", help="batches, newest first")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=batch_list)
    p = batch.add_parser("status", help="counts per status")
    p.add_argument("group_id")
    p.add_argument("--watch", action="store_true", help="live progress until the batch finishes")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=batch_status)
    p = batch.add_parser("results", help="wait for and print the results")
    p.add_argument("group_id")
    p.add_argument("--timeout", type=float)
    p.add_argument("--keep", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=batch_results)
    for name, func in (("cancel", batch_cancel), ("cleanup", batch_cleanup)):
        p = batch.add_parser(name)
        p.add_argument("group_id")
        p.set_defaults(func=func)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except KineticError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
