"""``kinetic ui``: serve the web dashboard over the storage root (``kinetic_core.ui``)."""

from __future__ import annotations

import click

import kinetic_core as kc
from kinetic_core.cli.common import DONE, listable_root


@click.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind. Any other than loopback requires a token (given or generated).",
)
@click.option("--port", type=click.IntRange(0, 65535), default=8265, show_default=True)
@click.option(
    "--token",
    envvar="KINETIC_UI_TOKEN",
    help="Every request must carry it (generated and printed when --host is not loopback). "
    "Env: KINETIC_UI_TOKEN.",
)
@click.option(
    "--allow-actions",
    is_flag=True,
    help="Let the pages cancel jobs and batches (read-only without it).",
)
@click.pass_context
def ui(ctx: click.Context, host: str, port: int, token: str | None, allow_actions: bool) -> int:
    """Serve the dashboard (jobs, batches, usage) read from the storage root; prints its URL."""
    from kinetic_core.ui import serve

    storage = listable_root(ctx)
    if token is not None and len(token) < 8:
        raise kc.ConfigError("--token must be at least 8 characters (or leave it out).")
    serve(host=host, port=port, storage=storage, token=token, allow_actions=allow_actions)
    return DONE
