"""``kinetic jobs list|status|history|logs|result|cancel|cleanup``."""

from __future__ import annotations

from typing import Any

import click

import kinetic_core as kc
import kinetic_core.cli.render as render
from kinetic_core import debugging
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
from kinetic_core.storage import open_storage

job_id_argument = click.argument("job_id", shell_complete=complete_job_id)


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
@click.option(
    "--tag",
    "tags",
    type=KeyValue(),
    multiple=True,
    shell_complete=complete_tag,
    help="Only jobs with this tag (repeat: all of them).",
)
@click.option("--name", help="Only jobs with this name.")
@click.option(
    "--owner",
    help="Only jobs of this owner (recorded at submit: owner=, KINETIC_OWNER, else the user).",
)
@click.option(
    "--since",
    type=When(),
    help="Only jobs created at or after WHEN: 30m, 2h, 7d, 2026-11-25, 2026-11-25T14:30.",
)
@click.option("--until", type=When(), help="Only jobs created at or before WHEN (same forms).")
@click.option("--reverse", is_flag=True, help="Oldest first.")
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
    limit: int,
    as_json: bool,
) -> int:
    """Jobs, newest first (--reverse: oldest first); --limit counts after filtering."""
    root = listable_root(ctx)
    handles = kc.list_jobs(
        statuses=statuses or None,
        tags=dict(tags),
        name=name,
        owner=owner,
        since=since,
        until=until,
        reverse=reverse,
        limit=limit,
        target=target_of(ctx),
    )
    rows = list(zip(handles, kc.resolve_states(handles) if handles else [], strict=True))
    if as_json:
        render.emit_json([{**h.to_dict(), "state": s.to_dict()} for h, s in rows])
    else:
        render.console().print(render.state_table(f"{len(rows)} jobs", rows))
    filtered = statuses or tags or name or owner or since is not None or until is not None
    if not rows and not filtered:
        render.hint(empty_hint("jobs", root))
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
    """The debug record of a failed ``debug=True`` job still held for inspection."""
    if state.status is not kc.JobStatus.FAILED:
        return None
    return debugging.held(open_storage(handle.storage), state.job_id)


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
@click.pass_context
def cleanup(ctx: click.Context, job_id: str, outputs: bool) -> int:
    """Free a job's backend resources and stored envelopes."""
    handle = kc.attach(job_id, target=target_of(ctx))
    handle.cleanup(outputs=outputs)  # also stops what a debug=True job kept for inspection
    click.echo(f"{handle.job_id}: cleaned up")
    return DONE
