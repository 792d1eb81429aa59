"""``kinetic ui`` as a subprocess over one storage root, for a browser test."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.browser import free_port, serving

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def kinetic_ui(storage: str, log: Path, module: str = "kinetic_core.cli") -> Iterator[str]:
    """The dashboard's URL while it serves ``storage`` (stopped afterwards); ``module``: the
    CLI's, or a test's module that registers a test backend first and then runs it."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "providers")])}
    argv = [sys.executable, "-m", module, "--storage", storage]
    argv += ["ui", "--host", "127.0.0.1", "--port", str(port)]
    with serving(argv, env, log, port, "/", timeout=120) as url:
        yield url
