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


def resumable(workdir: str, steps: int, exit_code: int | None = None) -> dict[str, Any]:
    """A job that checkpoints each step in ``workdir`` and resumes from it. Its first run
    stops half-way and waits to be killed (or exits with ``exit_code``); every run notes
    its start, and a run to the end notes its completion."""
    job_id = os.environ["KINETIC_JOB_ID"]
    checkpoint = os.path.join(workdir, "checkpoint")
    start = 0
    if os.path.exists(checkpoint):
        with open(checkpoint) as fh:
            start = int(fh.read())
    with open(os.path.join(workdir, "starts"), "a") as fh:
        fh.write(f"{job_id} {start}\n")
    print(f"{job_id} starts at step {start}", flush=True)
    for step in range(start, steps):
        with open(checkpoint + ".tmp", "w") as fh:
            fh.write(str(step + 1))
        os.replace(checkpoint + ".tmp", checkpoint)
        if start == 0 and step + 1 == steps // 2:
            if exit_code is not None:
                raise SystemExit(exit_code)
            with open(os.path.join(workdir, "halfway.tmp"), "w") as fh:
                fh.write(job_id)
            os.replace(os.path.join(workdir, "halfway.tmp"), os.path.join(workdir, "halfway"))
            time.sleep(600)  # until killed
    with open(os.path.join(workdir, "completions"), "a") as fh:
        fh.write(f"{job_id}\n")
    return {"resumed_from": start, "job_id": job_id}


def exit_with(code: int) -> None:
    raise SystemExit(code)
