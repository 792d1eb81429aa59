"""``kinetic batch list|status|results|cancel|cleanup``."""

from __future__ import annotations

import click
from rich.progress import BarColumn, Progress, TextColumn

import kinetic_core as kc
import kinetic_core.cli.render as render
from kinetic_core.cli.common import (
    DONE,
    JOB_FAILED,
    complete_group_id,
    empty_hint,
    exit_for,
    json_option,
    limit_option,
    listable_root,
    target_of,
)

group_id_argument = click.argument("group_id", shell_complete=complete_group_id)


@click.group()
def batch() -> None:
    """Batches (submit_map)."""


@batch.command("list")
@limit_option
@json_option
@click.pass_context
def list_(ctx: click.Context, limit: int, as_json: bool) -> int:
    """Batches, newest first, with counts per status."""
    root = listable_root(ctx)
    summaries = [
        render.batch_summary(b) for b in kc.list_batches(target=target_of(ctx), limit=limit)
    ]
    if as_json:
        render.emit_json(summaries)
    else:
        render.console().print(render.batches_table(summaries))
    if not summaries:
        render.hint(empty_hint("batches", root))
    return DONE


@batch.command()
@group_id_argument
@click.option("--watch", is_flag=True, help="Live progress until every input is final.")
@json_option
@click.pass_context
def status(ctx: click.Context, group_id: str, watch: bool, as_json: bool) -> int:
    """Counts per status (exit 1 if any input failed, was cancelled or was not submitted)."""
    handle = kc.attach_batch(group_id, target=target_of(ctx))
    if watch:
        _watch(handle, stderr=as_json)  # with --json, stdout carries only the JSON
    summary = render.batch_summary(handle)
    if as_json:
        render.emit_json(summary)
        return _exit_for_counts(summary["counts"])
    out = render.console()
    out.print(render.status_heading(summary))
    out.print(render.status_table(summary["counts"]))
    failed = handle.failed_children()
    if failed:
        out.print(render.failed_children_table(failed))
    return _exit_for_counts(summary["counts"])


def _exit_for_counts(counts: dict[kc.ChildStatus, int]) -> int:
    return max((exit_for(s) for s in counts), default=DONE)


def _watch(handle: kc.BatchHandle, *, stderr: bool) -> None:
    """A live progress bar until every input is final."""
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TextColumn("{task.fields[counts]}"),
        console=render.console(stderr=stderr),
    ) as progress:
        bar = progress.add_task(handle.group_id, total=handle.total, counts="")
        for snapshot in handle.progress():
            progress.update(
                bar, completed=snapshot.finished, counts=render.counts_text(snapshot.counts)
            )


@batch.command()
@group_id_argument
@click.option(
    "--timeout", type=float, metavar="S", help="Give up waiting after S seconds (exit 124)."
)
@click.option("--keep", is_flag=True, help="Do not clean up collected children.")
@json_option
@click.pass_context
def results(
    ctx: click.Context, group_id: str, timeout: float | None, keep: bool, as_json: bool
) -> int:
    """Wait for every input and print the values; failures are listed and exit 1."""
    handle = kc.attach_batch(group_id, target=target_of(ctx))
    try:
        values = handle.results(cleanup=not keep, timeout=timeout)
    except kc.BatchError as exc:
        render.hint(str(exc))
        for child in handle.failed_children():
            render.hint(render.failed_child_line(child))
        if as_json:
            render.emit_json({"group_id": handle.group_id, "partial_results": exc.partial_results})
        return JOB_FAILED
    if as_json:
        render.emit_json({"group_id": handle.group_id, "results": values})
    else:
        render.console().print(values)
    return DONE


@batch.command()
@group_id_argument
@click.pass_context
def cancel(ctx: click.Context, group_id: str) -> int:
    """Durable cancel: no more inputs are launched; running children are cancelled."""
    kc.attach_batch(group_id, target=target_of(ctx)).cancel()
    click.echo(f"{group_id}: cancel requested")
    return DONE


@batch.command()
@group_id_argument
@click.option("--cancel", is_flag=True, help="Cancel the batch first if a child still runs.")
@click.pass_context
def cleanup(ctx: click.Context, group_id: str, cancel: bool) -> int:
    """Free the children's backend resources and stored envelopes (a batch still running
    is refused unless --cancel)."""
    kc.attach_batch(group_id, target=target_of(ctx)).cleanup(cancel=cancel)
    click.echo(f"{group_id}: cleaned up")
    return DONE
