"""``kinetic jobs list|status|history|logs|result|cancel|cleanup|signal|top``."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import click

import kinetic_core as kc
import kinetic_core.cli.render as render
from kinetic_core.cli.common import (
    DONE,
    JOB_FAILED,
    KeyValue,
    When,
    complete_job_id,
    complete_tag,
    empty_hint,
    exit_for,
    json_option,
    limit_option,
    listable_root,
    target_of,
)
from kinetic_core.control.polling import poll_ticks
from kinetic_core.control.usage import combine, per_job
from kinetic_core.runtime import debugging
from kinetic_core.util.words import plural

job_id_argument = click.argument("job_id", shell_complete=complete_job_id)
# The filters `list` and `usage` share (kc.list_jobs's).
tag_option = click.option(
    "--tag",
    "tags",
    type=KeyValue(),
    multiple=True,
    shell_complete=complete_tag,
    help="Only jobs with this tag (repeat: all of them).",
)
name_option = click.option("--name", help="Only jobs with this name.")
since_option = click.option(
    "--since",
    type=When(),
    help="Only jobs created at or after WHEN: 30m, 2h, 7d, 2026-11-25, 2026-11-25T14:30.",
)
until_option = click.option(
    "--until", type=When(), help="Only jobs created at or before WHEN (same forms)."
)


@click.group()
def jobs() -> None:
    """Single jobs."""


@jobs.command("list")
@click.option(
    "--status",
    "statuses",
    type=click.Choice([s.value for s in kc.JobStatus], case_sensitive=False),
    multiple=True,
    help="Only jobs in this status (repeat: any of them).",
)
@tag_option
@name_option
@click.option(
    "--owner",
    help="Only jobs of this owner (recorded at submit: owner=, KINETIC_OWNER, else the user).",
)
@since_option
@until_option
@click.option("--reverse", is_flag=True, help="Oldest first.")
@click.option(
    "--all",
    "all_",
    is_flag=True,
    help="Every job, batch children and batch drivers too (default: one row per batch).",
)
@limit_option
@json_option
@click.pass_context
def list_(
    ctx: click.Context,
    statuses: tuple[str, ...],
    tags: tuple[tuple[str, str], ...],
    name: str | None,
    owner: str | None,
    since: float | None,
    until: float | None,
    reverse: bool,
    all_: bool,
    limit: int,
    as_json: bool,
) -> int:
    """Jobs, newest first (--reverse: oldest first); --limit counts after filtering.

    A batch shows as one row with its progress (its children and its driver job are
    listed with --all); a batch counts once against --limit. --json lists jobs only, one
    object shape (batch children and drivers as jobs, as with --all; batches: `kinetic
    batch list --json`)."""
    root = listable_root(ctx)
    listed = kc.list_jobs(
        statuses=statuses or None,
        tags=dict(tags),
        name=name,
        owner=owner,
        since=since,
        until=until,
        reverse=reverse,
        limit=limit,
        target=target_of(ctx),
        include_batch_children=all_ or as_json,  # --json: one shape, every row a job
    )
    handles, batches = _split_batches(listed, all_ or as_json, ctx)
    rows = list(zip(handles, kc.resolve_states(handles) if handles else [], strict=True))
    if as_json:
        render.emit_json([{**h.to_dict(), "state": s.to_dict()} for h, s in rows])
    else:
        render.console().print(render.state_table(plural(len(rows), "job"), rows))
        if batches:
            render.console().print(render.batches_table(batches))
    filtered = statuses or tags or name or owner or since is not None or until is not None
    if not rows and not batches and not filtered:
        render.hint(empty_hint("jobs", root))
    return DONE


def _split_batches(
    listed: list[kc.JobHandle], all_: bool, ctx: click.Context
) -> tuple[list[kc.JobHandle], list[dict[str, Any]]]:
    """Jobs on their own, and one summary (progress) per batch the page names: a batch
    member stands for its batch unless ``all_`` (``--all``). A member whose batch record
    is gone stays a job row."""
    if all_:
        return listed, []
    handles: list[kc.JobHandle] = []
    batches: list[dict[str, Any]] = []
    for handle in listed:
        group = kc.batch_of(handle)
        summary = None if group is None else _batch_summary(group, ctx)
        if summary is None:
            handles.append(handle)
        else:
            batches.append(summary)
    return handles, batches


def _batch_summary(group_id: str, ctx: click.Context) -> dict[str, Any] | None:
    """``batch status --json``'s summary of a batch; None where its records are gone."""
    try:
        return render.batch_summary(kc.attach_batch(group_id, target=target_of(ctx)))
    except kc.JobNotFound:
        return None


@jobs.command()
@click.pass_context
def reindex(ctx: click.Context) -> int:
    """Index every job in storage, so listing reads pages, not every job (once, for a
    store written by older versions; safe to repeat, also while jobs are submitted)."""
    report = kc.repair_index(target=target_of(ctx))
    click.echo(
        f"{plural(report.jobs, 'job')}; wrote {report.created} index entries and {report.ended} end "
        "entries; the index is complete"
    )
    return DONE


@jobs.command()
@job_id_argument
@json_option
@click.pass_context
def status(ctx: click.Context, job_id: str, as_json: bool) -> int:
    """State of one job (exit 1 if it failed or was cancelled)."""
    handle = kc.attach(job_id, target=target_of(ctx))
    state = handle.state()
    held = _held(handle, state)
    if as_json:
        render.emit_json({**handle.to_dict(), "state": state.to_dict(), "debug": held})
    else:
        render.console().print(render.job_details(handle, state))
        if state.recoveries:
            render.hint(f"{handle.job_id}: {state.recovery_note}")
        if held:
            click.echo(debugging.describe(held))
    return exit_for(state.status)


def _held(handle: kc.JobHandle, state: kc.JobState) -> dict[str, Any] | None:
    """The debug record of a failed ``debug=True`` job still held for inspection (its
    processes or pod still there)."""
    return handle.debug_hold(state)


@jobs.command()
@job_id_argument
@json_option
@click.pass_context
def history(ctx: click.Context, job_id: str, as_json: bool) -> int:
    """Every recorded transition of a job, across its recovered attempts."""
    handle = kc.attach(job_id, target=target_of(ctx))
    transitions = handle.history()
    if as_json:
        render.emit_json({"job_id": handle.job_id, "history": [t.to_dict() for t in transitions]})
    else:
        render.console().print(render.history_table(handle.job_id, transitions))
    return DONE


@jobs.command()
@job_id_argument
@click.option("--tail", type=click.IntRange(min=0), metavar="N", help="Only the last N lines.")
@click.option("--follow", "-f", is_flag=True, help="Stream lines until the job ends.")
@click.option("--json", "as_json", is_flag=True, help="JSON (one object per line with --follow).")
@click.option(
    "--worker",
    type=click.IntRange(min=0),
    metavar="N",
    help="Only worker N's output (a multi-host job; without it every worker's, prefixed [wN]).",
)
@click.pass_context
def logs(
    ctx: click.Context,
    job_id: str,
    tail: int | None,
    follow: bool,
    as_json: bool,
    worker: int | None,
) -> int:
    """A job's output. With --follow: exit 1 if the job failed or was cancelled."""
    handle = kc.attach(job_id, target=target_of(ctx))
    if not follow:
        text = handle.logs(tail=tail, worker=worker)
        if as_json:
            render.emit_json({"job_id": handle.job_id, "lines": text.splitlines()})
        else:
            click.echo(text, nl=False)
        return DONE
    for line in handle.follow_logs(worker=worker):
        click.echo(render.json_line(handle.job_id, line) if as_json else line)
    state = handle.state()
    detail = ": ".join(x for x in (state.reason, state.message) if x)
    render.hint(
        f"kinetic job {handle.job_id}: {state.status.value}" + (f" ({detail})" if detail else "")
    )
    return exit_for(state.status)


@jobs.command()
@job_id_argument
@click.option(
    "--timeout", type=float, metavar="S", help="Give up waiting after S seconds (exit 124)."
)
@click.option("--keep", is_flag=True, help="Do not clean up after collecting.")
@json_option
@click.pass_context
def result(
    ctx: click.Context, job_id: str, timeout: float | None, keep: bool, as_json: bool
) -> int:
    """Wait for a job and print its result; a remote error is printed and exits 1."""
    handle = kc.attach(job_id, target=target_of(ctx))
    try:
        value = handle.result(timeout=timeout, cleanup=not keep)
    except (kc.JobFailed, kc.JobCancelled) as exc:
        return _report_failure(handle, exc, as_json)
    except kc.KineticError:
        raise
    except Exception as exc:  # the remote exception, rebuilt
        return _report_failure(handle, exc, as_json)
    if as_json:
        render.emit_json({"job_id": handle.job_id, "result": value})
    else:
        render.console().print(value)
    return DONE


def _report_failure(handle: kc.JobHandle, exc: BaseException, as_json: bool) -> int:
    """The job's error once: type, message and remote traceback (``__notes__``)."""
    if as_json:
        notes = getattr(exc, "__notes__", [])
        remote_tb = exc.remote_traceback if isinstance(exc, kc.RemoteError) else "\n".join(notes)
        error: dict[str, Any] = {
            "type": exc.type_name if isinstance(exc, kc.RemoteError) else type(exc).__name__,
            "message": exc.remote_message if isinstance(exc, kc.RemoteError) else str(exc),
            "traceback": remote_tb or None,
        }
        if isinstance(exc, kc.JobFailed):
            error["log_tail"] = exc.log_tail
        render.emit_json({"job_id": handle.job_id, "error": error})
    else:
        click.echo(kc.describe_failure(handle, exc), err=True)
    return JOB_FAILED


@jobs.command()
@job_id_argument
@click.pass_context
def cancel(ctx: click.Context, job_id: str) -> int:
    """Cancel a job (exit 0 also when it had already finished)."""
    handle = kc.attach(job_id, target=target_of(ctx))
    cancelled = handle.cancel()
    click.echo(f"{handle.job_id}: {'cancel requested' if cancelled else 'already finished'}")
    return DONE


@jobs.command()
@job_id_argument
@click.option("--outputs", is_flag=True, help="Also delete the job's output folder.")
@click.option("--cancel", is_flag=True, help="Cancel the job first if it still runs.")
@click.pass_context
def cleanup(ctx: click.Context, job_id: str, outputs: bool, cancel: bool) -> int:
    """Free a job's backend resources and stored envelopes (a job still running is
    refused unless --cancel)."""
    handle = kc.attach(job_id, target=target_of(ctx))
    # also stops what a debug=True job kept for inspection (it has ended: FAILED)
    handle.cleanup(outputs=outputs, cancel=cancel)
    click.echo(f"{handle.job_id}: cleaned up")
    return DONE


# ---- signal and top (neuro's send_signal and top) -----------------------------------------


@jobs.command("signal")
@job_id_argument
@click.argument("sig", metavar="SIGNAL")
@click.option(
    "--worker",
    type=click.IntRange(min=0),
    metavar="N",
    help="Only worker N (default: every worker).",
)
@click.option("--wait", is_flag=True, help="Wait until the job's runner delivered it.")
@click.option("--timeout", type=float, default=30.0, show_default=True, metavar="S")
@json_option
@click.pass_context
def signal_(
    ctx: click.Context,
    job_id: str,
    sig: str,
    worker: int | None,
    wait: bool,
    timeout: float,
    as_json: bool,
) -> int:
    """Send SIGNAL (SIGUSR1, USR1 or 10) to a running job's function process."""
    handle = kc.attach(job_id, target=target_of(ctx))
    req = handle.send_signal(sig, worker=worker, wait=wait, timeout=timeout)
    if as_json:
        render.emit_json(dataclasses.asdict(req))
        return DONE
    to = "every worker" if worker is None else f"worker {worker}"
    click.echo(f"{req.job_id}: {req.signal} sent to {to} (request {req.request_id})")
    for ack in req.acks:
        click.echo(f"  worker {ack.worker}: {ack.note}")
    if wait and not req.acks:
        render.hint(f"{req.job_id} ended before its runner read the request")
    return DONE if not wait or req.delivered else JOB_FAILED


@jobs.command()
@job_id_argument
@click.option("--watch", is_flag=True, help="Print again every few seconds until the job ends.")
@click.option("--interval", type=float, default=5.0, show_default=True, metavar="S")
@json_option
@click.pass_context
def top(ctx: click.Context, job_id: str, watch: bool, interval: float, as_json: bool) -> int:
    """A running job's CPU, memory and GPU use, per worker (sampled by its runner)."""
    handle = kc.attach(job_id, target=target_of(ctx))
    shown: tuple[Any, ...] = ()
    for _ in poll_ticks(interval=interval, timeout=None, describe=lambda: "top"):
        now = handle.top()
        seen = (now.status, *(w.at for w in now.workers))
        if seen == shown:  # the ticks start short: print only what is new
            continue
        shown = seen
        if as_json:
            render.emit_json(now.to_dict())
        else:
            render.console().print(_top_table(now))
            if now.note:
                render.hint(f"{now.job_id}: {now.note}")
        if not watch or kc.JobStatus(now.status).terminal:
            return DONE
    return DONE  # pragma: no cover: poll_ticks never ends by itself


def _top_table(now: kc.JobTop) -> Any:
    """One row per worker (and per GPU of that worker)."""
    from rich.table import Table

    table = Table(title=f"{now.job_id} ({now.status})")
    for column in ("worker", "sampled", "CPU %", "RSS", "GPU", "GPU util %", "GPU memory"):
        table.add_column(column)
    for w in now.workers:
        cells = [str(w.worker), render.ago(datetime.fromtimestamp(w.at, UTC))]
        cells += [_num(w.cpu_percent), _bytes(w.rss_bytes)]
        for i, gpu in enumerate(w.gpus or [None]):
            gpu_cells = (
                ["-", "-", "-"]
                if gpu is None
                else [
                    f"{gpu.index} {gpu.name}",
                    _num(gpu.utilization_percent),
                    f"{_bytes(gpu.memory_used_bytes)} / {_bytes(gpu.memory_total_bytes)}",
                ]
            )
            table.add_row(*(cells if i == 0 else [""] * 4), *gpu_cells)
    return table


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _bytes(value: int | None) -> str:
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"  # pragma: no cover


@jobs.command("port-forward")
@job_id_argument
@click.argument("ports", nargs=-1, required=True, metavar="[LOCAL]:REMOTE|PORT...")
@click.option(
    "--worker",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    metavar="N",
    help="Forward to worker N of a multi-host job.",
)
@click.pass_context
def port_forward(ctx: click.Context, job_id: str, ports: tuple[str, ...], worker: int) -> int:
    """Forward local ports to a running job's ports (TensorBoard, a profiler) until Ctrl-C.

    Each port is LOCAL:REMOTE, PORT (the same number on both sides) or :REMOTE (any free
    local port), as kubectl port-forward takes them; only 127.0.0.1 listens. On Kubernetes
    through the API server's pod port-forward (RBAC: pods/portforward get, create); a
    local-backend job's ports are already on localhost (said, exit 0). Exit 1 when the
    forward stops by itself (the job's pod went away)."""
    handle = kc.attach(job_id, target=target_of(ctx))
    forward = handle.port_forward(*ports, worker=worker)
    if forward.already_local:
        click.echo(f"{handle.job_id}: {forward.note}")
        return DONE
    with forward:
        for spec in forward.ports:
            click.echo(f"Forwarding from 127.0.0.1:{spec.local} -> {spec.remote}")
        render.hint(f"{handle.job_id}: {forward.note}; Ctrl-C stops.")
        try:
            forward.wait()
        except KeyboardInterrupt:
            return DONE
    return JOB_FAILED if forward.ended else DONE


# ---- usage ----------------------------------------------------------------------------------


@jobs.command()
@click.argument("job_id", required=False, shell_complete=complete_job_id)
@since_option
@until_option
@tag_option
@name_option
@click.option("--owner", help="Only jobs of this owner.")
@click.option("--by", "by", metavar="TAGKEY", help="Sum per value of this tag (dag_id, team).")
@click.option(
    "--prices",
    metavar="FILE",
    help="Price table (JSON/YAML file) for the cost; default: each job's, else KINETIC_PRICES.",
)
@json_option
@click.pass_context
def usage(
    ctx: click.Context,
    job_id: str | None,
    since: float | None,
    until: float | None,
    tags: tuple[tuple[str, str], ...],
    name: str | None,
    owner: str | None,
    by: str | None,
    prices: str | None,
    as_json: bool,
) -> int:
    """Chip-hours, queued time and cost: one job's attempts (ID), or sums over the jobs
    the filters match, per value of a tag with --by."""
    if job_id is not None:
        if since is not None or until is not None or tags or name or owner or by:
            raise click.UsageError("give a job ID or filters (--since, --tag, --by...), not both")
        return _job_usage(kc.attach(job_id, target=target_of(ctx)), prices, as_json)
    listable_root(ctx)
    handles = kc.list_jobs(
        tags=dict(tags), name=name, owner=owner, since=since, until=until, target=target_of(ctx)
    )
    groups: dict[str | None, list[kc.JobHandle]] = {}
    for handle in reversed(handles):  # oldest first: a job's first attempt leads its chain
        groups.setdefault(handle.tags.get(by) if by else "all", []).append(handle)
    sums = {value: per_job(group, prices) for value, group in sorted(groups.items(), key=_key)}
    total = combine(u for group_usage in sums.values() for u in group_usage)
    if as_json:
        render.emit_json(
            {
                "by": by,
                "groups": [
                    {"value": v, "jobs": len(u), "usage": _sums(combine(u))}
                    for v, u in sums.items()
                ],
                "total": _sums(total),
            }
        )
        return DONE
    render.console().print(_groups_table(by, sums))
    render.console().print(_totals_line(total))
    return DONE


def _key(item: tuple[str | None, Any]) -> tuple[bool, str]:
    return (item[0] is None, item[0] or "")


def _job_usage(handle: kc.JobHandle, prices: str | None, as_json: bool) -> int:
    found = handle.usage(prices=prices)
    if as_json:
        render.emit_json({"job_id": handle.job_id, **found.to_dict()})
        return DONE
    table = _table(handle.job_id, ["#", "accelerator", "chips", "queued", "ran", "chip-h"], 1)
    table.add_column("ended", max_width=22, no_wrap=True, overflow="ellipsis")
    table.add_column("cost", justify="right", no_wrap=True)
    for a in found.attempts:
        ended = a.status + (f" {a.reason}" if a.reason else "") + (" (lost)" if a.lost else "")
        table.add_row(
            str(a.attempt),
            (a.accelerator or "cpu") + (" spot" if a.spot else ""),
            str(a.chips),
            render.seconds_text(a.queued_seconds),
            render.seconds_text(a.running_seconds),
            f"{a.chip_hours:.2f}",
            ended,
            _money(a.cost),
        )
    render.console().print(table)
    render.console().print(_totals_line(found))
    return DONE


def _table(title: str, columns: list[str], wide: int) -> Any:
    """A compact table that fits 80 columns: no vertical rules, cells never folded (the
    ``wide`` column, a name, is cut with an ellipsis)."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1))
    for i, col in enumerate(columns):
        table.add_column(
            col,
            justify="left" if i == wide else "right",
            no_wrap=True,
            overflow="ellipsis",
            max_width=22 if i == wide else None,
        )
    return table


def _groups_table(by: str | None, sums: dict[str | None, list[kc.Usage]]) -> Any:
    columns = [by or "jobs", "jobs", "chip-h", "useful", "lost", "queued", "cost"]
    table = _table(f"usage by {by}" if by else "usage", columns, 0)
    for value, jobs_usage in sums.items():
        u = combine(jobs_usage)
        table.add_row(
            "-" if value is None else value,
            str(len(jobs_usage)),
            f"{u.chip_hours:.2f}",
            f"{u.useful_chip_hours:.2f}",
            f"{u.lost_chip_hours:.2f}",
            render.seconds_text(u.queued_seconds),
            _money(u.cost),
        )
    return table


def _money(cost: float | None) -> str:
    return "-" if cost is None else f"{cost:.2f}"


def _totals_line(u: kc.Usage) -> str:
    """``total 3.20 chip-h (useful 2.40, lost 0.80), queued 41s, ran 12m 0s, cost 1.92
    USD``: under 80 columns."""
    cost = (
        "" if u.cost is None else f", cost {u.cost:.2f}" + (f" {u.currency}" if u.currency else "")
    )
    cpu = "" if any(a.chips for a in u.attempts) else ", CPU only"
    return (
        f"total {u.chip_hours:.2f} chip-h (useful {u.useful_chip_hours:.2f}, lost "
        f"{u.lost_chip_hours:.2f}), queued {render.seconds_text(u.queued_seconds)}, ran "
        f"{render.seconds_text(u.running_seconds)}{cost}{cpu}"
    )


def _sums(u: kc.Usage) -> dict[str, Any]:
    """A sum's figures without its attempts (``jobs usage ID --json`` lists those)."""
    return {k: v for k, v in u.to_dict().items() if k != "attempts"} | {"attempts": len(u.attempts)}
