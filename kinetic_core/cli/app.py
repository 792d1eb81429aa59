"""The ``kinetic`` command (click): global options, error handling and exit codes.

Commands return their exit code; a KineticError anywhere is one ``error: ...`` line and
exit 2; a closed pipe (``kinetic jobs logs -f ID | head``) ends quietly.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

import kinetic_core as kc
from kinetic_core.cli.batch import batch
from kinetic_core.cli.common import DONE, TIMED_OUT, USAGE
from kinetic_core.cli.jobs import jobs
from kinetic_core.cli.ui import ui

#: Exit code when the user interrupts (Ctrl-C), as shells report SIGINT.
INTERRUPTED = 130


class _Root(click.Group):
    """Maps what commands raise to the documented exit codes."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except kc.WaitTimeout as exc:  # --timeout passed: the job runs on
            click.echo(f"error: {exc}", err=True)
            return TIMED_OUT
        except kc.KineticError as exc:
            click.echo(f"error: {exc}", err=True)
            return USAGE
        except BrokenPipeError:  # the reader went away: stop quietly
            _silence_stdout()
            return DONE


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not complain."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (captured by a test harness)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


@click.group(
    cls=_Root,
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="Exit codes: 0 done, 1 a job or batch input failed or was cancelled, 2 bad usage "
    "or configuration, 124 --timeout passed. Shell completion: see docs/cli.md.",
)
@click.option(
    "--storage",
    metavar="URI",
    help="Storage root (default: KINETIC_STORAGE, then file://~/.kinetic).",
)
@click.version_option(kc.__version__, "--version", "-V", prog_name="kinetic")
def cli(storage: str | None) -> None:
    """Observe and manage kinetic detached jobs and batches."""


cli.add_command(jobs)
cli.add_command(batch)
cli.add_command(ui)


def run(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code instead of exiting."""
    try:
        code = cli.main(args=argv, prog_name="kinetic", standalone_mode=False)
    except click.ClickException as exc:  # usage errors: bad option, missing argument...
        exc.show()
        return exc.exit_code
    except click.Abort:
        click.echo("Aborted.", err=True)
        return INTERRUPTED
    return int(code or DONE)
