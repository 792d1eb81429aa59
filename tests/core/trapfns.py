"""Job bodies whose value or exception runs code when unpickled (issue 33): a viewer that
unpickles a job's output runs the job's code. Each trap writes ``marker-{pid}`` into a
folder when it is rebuilt outside a job, so a test sees which process loaded it."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def spring(folder: str) -> str:
    """Run on unpickling. Inside a job (the runner checks that its failure can be
    rebuilt) it does nothing: only a viewer's process leaves a marker."""
    if not os.environ.get("KINETIC_JOB_ID"):
        (Path(folder) / f"marker-{os.getpid()}").write_text("unpickled here")
    return "sprung"


def spring_error(folder: str) -> Exception:
    return ValueError(spring(folder))


class Trap:
    """A value whose unpickling calls ``spring``."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def __reduce__(self) -> tuple[Any, ...]:
        return (spring, (self.folder,))

    def __repr__(self) -> str:
        return f"Trap(in {self.folder})"


class TrapError(Exception):
    """An exception whose unpickling calls ``spring``."""

    def __init__(self, folder: str) -> None:
        super().__init__(f"trap in {folder}")
        self.folder = folder

    def __reduce__(self) -> tuple[Any, ...]:
        return (spring_error, (self.folder,))


def return_trap(folder: str) -> Trap:
    return Trap(folder)


def raise_trap(folder: str) -> None:
    raise TrapError(folder)


class Endless:
    """A value whose repr never ends (a by-value class in a user's module, say)."""

    def __repr__(self) -> str:
        while True:
            time.sleep(0.05)


class Slow:
    """A value whose repr takes ``seconds``."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __repr__(self) -> str:
        time.sleep(self.seconds)
        return "Slow()"


def return_endless() -> Endless:
    return Endless()


def return_big() -> list[str]:
    return ["x" * 10_000] * 10_000
