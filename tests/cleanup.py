"""Leave no job behind: kill what a (failing) test left running under a storage root."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path


def kill_leftovers(root: Path) -> None:
    """SIGKILL every unfinished local job's process group (supervisors lead their own)."""
    for launch in root.glob("backend-local/*/launch.json"):
        if (launch.parent / "exit.json").exists():
            continue
        with contextlib.suppress(ProcessLookupError, ValueError, KeyError, PermissionError):
            os.killpg(json.loads(launch.read_text())["pid"], signal.SIGKILL)
