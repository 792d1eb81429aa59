"""Job bodies for the core tests. Kept import-light: every job's runner imports this."""

from __future__ import annotations

import json
import os
import threading
import time
import weakref
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


def read_tree(path: str) -> dict[str, str]:
    """{relative path: text} of a file or folder (a file: {name: text})."""
    if os.path.isfile(path):
        with open(path) as fh:
            return {os.path.basename(path): fh.read()}
    found = {}
    for base, _, names in os.walk(path):
        for name in names:
            full = os.path.join(base, name)
            with open(full) as fh:
                found[os.path.relpath(full, path)] = fh.read()
    return found


def describe(value: Any) -> Any:
    """Each str in nested containers: (its type, its content) when it is an existing path."""
    if isinstance(value, str):
        return ["path", read_tree(value)] if os.path.exists(value) else value
    if isinstance(value, dict):
        return {k: describe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [describe(v) for v in value]
    if hasattr(value, "__dataclass_fields__"):
        return {k: describe(getattr(value, k)) for k in value.__dataclass_fields__}
    return repr(value)


def try_overwrite(path: str) -> str:
    try:
        with open(path, "w") as fh:
            fh.write("corrupted")
    except OSError as exc:
        return type(exc).__name__
    return "written"


def checkpointed(steps: int, fail_at: int | None = None) -> list[int]:
    """Resumes from ``ckpt.json`` in its output folder; fails once at ``fail_at``."""
    ckpt = os.path.join(os.environ["KINETIC_OUTPUT_DIR"], "ckpt.json")
    done: list[int] = []
    if os.path.exists(ckpt):
        with open(ckpt) as fh:
            done = json.load(fh)
    for step in range(len(done), steps):
        if step == fail_at and os.environ.get("KINETIC_JOB_ID", "").endswith("-1"):
            raise RuntimeError(f"failed at step {step}")
        done.append(step)
        with open(ckpt, "w") as fh:
            json.dump(done, fh)
    return done


def write_then(name: str, then: str, seconds: float = 0.0, ready: str = "") -> None:
    """Write ``name`` into the output folder (then touch ``ready``), then fail, sleep, or
    return."""
    with open(os.path.join(os.environ["KINETIC_OUTPUT_DIR"], name), "w") as fh:
        fh.write(os.environ.get("KINETIC_OUTPUT_URI", ""))
    if ready:
        with open(ready, "w"):
            pass
    if then == "fail":
        raise RuntimeError("failed after writing")
    if then == "sleep":
        time.sleep(seconds)


def sync_counts() -> list[int]:
    import kinetic_core as kc

    out = os.environ["KINETIC_OUTPUT_DIR"]
    counts = []
    with open(os.path.join(out, "a.txt"), "w") as fh:
        fh.write("a")
    counts.append(kc.sync_outputs())
    counts.append(kc.sync_outputs())
    with open(os.path.join(out, "b.txt"), "w") as fh:
        fh.write("b")
    counts.append(kc.sync_outputs())
    return counts


def resumable_in_outputs(steps: int, exit_code: int) -> dict[str, Any]:
    """Checkpoints each step in its own output folder (KINETIC_OUTPUT_DIR); the first run
    exits with ``exit_code`` half-way. A later attempt starts with that folder."""
    checkpoint = os.path.join(os.environ["KINETIC_OUTPUT_DIR"], "checkpoint")
    start = 0
    if os.path.exists(checkpoint):
        with open(checkpoint) as fh:
            start = int(fh.read())
    for step in range(start, steps):
        with open(checkpoint, "w") as fh:
            fh.write(str(step + 1))
        if start == 0 and step + 1 == steps // 2:
            raise SystemExit(exit_code)
    return {"resumed_from": start, "job_id": os.environ["KINETIC_JOB_ID"]}


def loaded_modules() -> list[str]:
    """The modules this process had loaded when the runner called the function."""
    import sys

    return sorted(sys.modules)


def leaves_work_for_exit(folder: str) -> str:
    """Leaves what a process's exit must still do: an ``atexit`` callback, a non-daemon
    thread still running, a thread pool never shut down with a task in flight."""
    import atexit
    from concurrent.futures import ThreadPoolExecutor

    def write(name: str, delay: float = 0.0) -> None:
        time.sleep(delay)
        with open(os.path.join(folder, name), "w") as fh:
            fh.write("done")

    atexit.register(write, "atexit")
    threading.Thread(target=write, args=("thread", 0.3)).start()
    ThreadPoolExecutor(1).submit(write, "pool", 0.3)
    print("printed-without-newline", end="")
    return "returned"


class Weighty:
    """An argument a job can watch (through a weak reference) while its result is stored."""


class ArgumentAlive:
    """A result that records, as the job pickles it, whether the job's argument is still
    alive: it unpickles as that bool."""

    def __init__(self, arg: Weighty) -> None:
        self.ref = weakref.ref(arg)

    def __reduce__(self) -> tuple[Any, tuple[bool]]:
        return bool, (self.ref() is not None,)


def watch_argument(arg: Weighty) -> ArgumentAlive:
    return ArgumentAlive(arg)
