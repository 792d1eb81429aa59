"""``kinetic gc``: remove ended jobs, batches and stored data past an age."""

from __future__ import annotations

import json

import click

import kinetic_core as kc
from kinetic_core.cli.common import listable_root, target_of
from kinetic_core.ops.gc import cutoff_of
from kinetic_core.util.words import plural


class Age(click.ParamType):
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w``, plain seconds, or an ISO date (older than
    it); anything else is a usage error (exit 2)."""

    name = "AGE"

    def convert(
        self, value: object, param: click.Parameter | None, ctx: click.Context | None
    ) -> object:
        text = str(value).strip()
        try:
            age: object = float(text)
        except ValueError:
            age = text
        try:
            cutoff_of(age)
        except kc.ConfigError:
            self.fail(f"{value!r} is not an age: use 30d, 12h, 90m, 45s or 2w.", param, ctx)
        return age


@click.command("gc")
@click.option("--older-than", "older_than", type=Age(), required=True, help="Age: 30d, 12h, 90m.")
@click.option("--dry-run", is_flag=True, help="Only report what would be removed.")
@click.option(
    "--include-uncollected",
    is_flag=True,
    help="Also remove succeeded jobs whose result was never collected.",
)
@click.option("--json", "as_json", is_flag=True, help="The report as one JSON object.")
@click.pass_context
def gc(
    ctx: click.Context, older_than: object, dry_run: bool, include_uncollected: bool, as_json: bool
) -> None:
    """Remove ended jobs (records, logs, outputs), their batches and the stored data no kept
    job uses, once older than --older-than. Pinned jobs (keep=True) and running ones stay;
    so do uncollected results unless --include-uncollected."""
    listable_root(ctx)
    report = kc.collect_garbage(
        older_than,
        dry_run=dry_run,
        include_uncollected=include_uncollected,
        target=target_of(ctx),
    )
    if as_json:
        click.echo(json.dumps(report.to_dict(), sort_keys=True))
        return
    verb = "Would remove" if dry_run else "Removed"
    click.echo(
        f"{verb} {plural(len(report.jobs), 'job')}, "
        f"{plural(len(report.batches), 'batch', 'batches')}, {len(report.data)} data, "
        f"{plural(len(report.blobs), 'blob')} ({plural(report.bytes, 'byte')})."
    )
    for reason, count in sorted(report.kept.items()):
        click.echo(f"Kept {plural(count, 'job')}: {reason}.")
    if report.data_note:
        click.echo(f"Data kept: {report.data_note}.")
    if report.deferred:
        click.echo(f"{report.deferred} deletions left for the next run.")
