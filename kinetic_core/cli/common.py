"""What every command shares: exit codes, the storage target, KEY=VALUE options, completion."""

from __future__ import annotations

import os
from typing import Any

import click

import kinetic_core as kc

DONE, JOB_FAILED, USAGE, TIMED_OUT = 0, 1, 2, 124


def exit_for(status: kc.JobStatus | kc.ChildStatus) -> int:
    """1 for an outcome that is final and not a success, else 0 (still running counts as 0)."""
    return JOB_FAILED if status.terminal and status.value != "SUCCEEDED" else DONE


def target_of(ctx: click.Context) -> kc.Target:
    """The Target for ``--storage`` (unset: ``KINETIC_STORAGE``, then the default)."""
    return kc.Target(storage=ctx.find_root().params.get("storage"))


def listable_root(ctx: click.Context) -> str:
    """The resolved storage root URI to list; a KineticError (exit 2) when it is malformed,
    is a file, or is a file:// folder that does not exist (a gs:// prefix always exists)."""
    root = kc.Target.coerce(target_of(ctx)).resolve().storage or ""
    if root.startswith("file://") and not os.path.exists(root[len("file://") :]):
        raise kc.StorageError(
            f"No kinetic data at {root}: it does not exist. Check --storage / KINETIC_STORAGE."
        )
    return root


def empty_hint(what: str, root: str) -> str:
    return f"No kinetic {what} at {root}. Is --storage / KINETIC_STORAGE right?"


class KeyValue(click.ParamType):
    """``KEY=VALUE`` as a (key, value) pair; anything else is a usage error (exit 2)."""

    name = "KEY=VALUE"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        key, sep, val = str(value).partition("=")
        if not sep or not key.strip():
            self.fail(f"{value!r} is not KEY=VALUE (for example: team=ml).", param, ctx)
        return key.strip(), val


class When(click.ParamType):
    """A point in time for ``--since``/``--until``: ``30m``/``2h``/``7d`` back from now, an
    ISO date or date-time, or epoch seconds (as epoch seconds); else a usage error (exit 2)
    listing those forms."""

    name = "WHEN"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float):
            return value
        text = str(value).strip()
        try:
            return kc.parse_when(float(text) if _is_number(text) else text)
        except kc.ConfigError:
            self.fail(f"{value!r} is not a time: use {CLI_WHEN_FORMS}.", param, ctx)


CLI_WHEN_FORMS = (
    "a duration back from now (30m, 2h, 7d; also s and w), an ISO date or date-time "
    "(2026-11-25, 2026-11-25T14:30, local time unless it ends in an offset such as +00:00), "
    "or epoch seconds (1764000000)"
)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
limit_option = click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True)


def _completions(
    found: list[Any], attr: str, incomplete: str
) -> list[click.shell_completion.CompletionItem]:
    return [
        click.shell_completion.CompletionItem(getattr(x, attr), help=x.name)
        for x in found
        if getattr(x, attr).startswith(incomplete)
    ]


def complete_job_id(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[click.shell_completion.CompletionItem]:
    """Job ids under the storage root, newest first, for shell completion."""
    try:
        return _completions(kc.list_jobs(target=target_of(ctx), limit=200), "job_id", incomplete)
    except kc.KineticError:
        return []


def complete_tag(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[click.shell_completion.CompletionItem]:
    """``KEY=VALUE`` of every tag in use under the storage root (``kc.tags()``)."""
    try:
        in_use = kc.tags(target=target_of(ctx))
    except kc.KineticError:
        return []
    pairs = [f"{key}={value}" for key, values in in_use.items() for value in values]
    return [click.shell_completion.CompletionItem(p) for p in pairs if p.startswith(incomplete)]


def complete_group_id(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[click.shell_completion.CompletionItem]:
    """Batch group ids under the storage root, for shell completion."""
    try:
        batches = kc.list_batches(target=target_of(ctx), limit=200)
    except kc.KineticError:
        return []
    return _completions(batches, "group_id", incomplete)
