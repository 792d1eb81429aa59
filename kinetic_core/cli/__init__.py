"""``kinetic``: observe and manage detached jobs and batches from a shell.

Exit codes: 0 done, 1 a job (or a batch input) failed or was cancelled, 2 bad usage or
configuration (the message says what to do), 124 ``--timeout`` passed (the job runs on).
The command line lives in ``kinetic_core.cli.app``; importing it needs the ``cli`` extra.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run ``kinetic`` with ``argv`` (default: the process's arguments); the exit code."""
    try:
        from kinetic_core.cli.app import run
    except ImportError as exc:  # pragma: no cover - exercised only without the cli extra
        print(
            f"The kinetic CLI needs the cli extra ({exc}): pip install 'kinetic-workflows[cli]'",
            file=sys.stderr,
        )
        return 2
    return run(argv)
