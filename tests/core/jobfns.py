"""Job bodies for the core tests. Kept import-light: every job's runner imports this."""

from __future__ import annotations

import os
import threading
import time
from typing import Any


def add(a: int, b: int = 0) -> int:
    return a + b


def echo_env(*names: str) -> dict[str, str | None]:
    return {n: os.environ.get(n) for n in names}


def fail(message: str) -> None:
    raise ValueError(message)


class Unpicklable(Exception):
    """An exception whose instances cannot be pickled (holds a lock)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


def fail_unpicklable(message: str) -> None:
    raise Unpicklable(message)


def sleep(seconds: float, value: Any = None) -> Any:
    time.sleep(seconds)
    return value


def chatty(lines: int, pause: float = 0.0) -> int:
    for i in range(lines):
        print(f"line {i}", flush=True)
        time.sleep(pause)
    return lines


def write_output(name: str, text: str) -> str:
    path = os.path.join(os.environ["KINETIC_OUTPUT_DIR"], name)
    with open(path, "w") as fh:
        fh.write(text)
    return path


def pid_then_sleep(path: str, seconds: float) -> None:
    with open(path + ".tmp", "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(path + ".tmp", path)  # a reader that sees the file sees the whole pid
    time.sleep(seconds)


def exit_code(code: int) -> None:
    os._exit(code)


def unpicklable_result() -> Any:
    return threading.Lock()


def split_lines(count: int, pause: float) -> int:
    """Writes each line in two halves with a pause between: readers must not split it."""
    import sys

    for i in range(count):
        sys.stdout.write(f"first half {i} ")
        sys.stdout.flush()
        time.sleep(pause)
        sys.stdout.write(f"second half {i}\n")
        sys.stdout.flush()
    sys.stdout.write("no newline at the end")
    sys.stdout.flush()
    return count


def wait_for_file(path: str, value: Any = None, ready: str = "", timeout: float = 60.0) -> Any:
    """Return ``value`` as soon as ``path`` exists (a gate the test opens); first create
    ``ready`` (if given) to say the function is running."""
    if ready:
        open(ready, "w").close()
    deadline = time.monotonic() + timeout
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.001)
    return value


def write_marker(path: str) -> str:
    with open(path, "w") as fh:
        fh.write("ran")
    return path
