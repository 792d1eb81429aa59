"""Job functions for the browser tests (importable by the job processes)."""

from __future__ import annotations

import os
import time


def gated_ticks(gate: str, lines: int, pause: float) -> int:
    """Print ``tick 0``, wait until the file ``gate`` exists (the test has the page open
    on the running job), then print ``tick 1`` .. ``tick lines-1`` ``pause`` apart."""
    print("tick 0", flush=True)
    deadline = time.monotonic() + 300
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.05)
    for i in range(1, lines):
        time.sleep(pause)
        print(f"tick {i}", flush=True)
    return lines


def numbered_lines(count: int) -> int:
    """``count`` numbered lines of about 50 bytes (a long log)."""
    pad = "x" * 38
    for i in range(count):
        print(f"line {i:06d} {pad}")
    return count


def stamped_lines(count: int) -> int:
    """Lines led by an ISO date-time, as logging's formatters write them."""
    for i in range(count):
        print(f"2026-01-02T03:04:{i % 60:02d}Z step {i}", flush=True)
    return count


def recover_after_gate(gate: str, marks: str) -> str:
    """Attempt 1 prints, waits for the file ``gate``, then exits 75 (a listed exit code:
    the job recovers); the next attempt prints and returns. ``marks``: a folder where each
    attempt notes itself."""
    os.makedirs(marks, exist_ok=True)
    first = not os.listdir(marks)
    job_id = os.environ["KINETIC_JOB_ID"]
    with open(os.path.join(marks, job_id), "w") as fh:
        fh.write("started")
    if first:
        print("attempt one is running", flush=True)
        deadline = time.monotonic() + 300
        while not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.05)
        print("attempt one asks for a restart", flush=True)
        raise SystemExit(75)
    print("attempt two picks up", flush=True)
    return "done"


def preempted_training(marks: str, first: float = 3.0, second: float = 5.0) -> str:
    """A training run whose first attempt is stopped part-way (exit 75, a listed exit code:
    as a preempted slice, it recovers) and whose next attempt runs to the end. ``marks``:
    a folder where each attempt notes itself."""
    os.makedirs(marks, exist_ok=True)
    resumed = bool(os.listdir(marks))
    with open(os.path.join(marks, os.environ["KINETIC_JOB_ID"]), "w") as fh:
        fh.write("started")
    if not resumed:
        print("step 0 .. 300: training", flush=True)
        time.sleep(first)
        print("the slice was preempted at step 300", flush=True)
        raise SystemExit(75)
    print("resumed from the checkpoint of step 300", flush=True)
    time.sleep(second)
    print("step 1000: done", flush=True)
    return "trained"


def slice_training(marks: str, second: float) -> str:
    """Training on every worker of a TPU slice. Attempt 1 trains until its slice is
    preempted (SIGTERM: the runner stores no result, the backend says Preempted, the job
    recovers); the next attempt resumes from the checkpoint and runs ``second`` seconds to
    the end. ``marks``: a folder where each worker of each attempt notes itself once it
    trains (``{job id}-{worker}``)."""
    import kinetic_core as kc

    me = kc.worker()
    job_id = os.environ["KINETIC_JOB_ID"]
    os.makedirs(marks, exist_ok=True)
    resumed = any(not name.startswith(job_id) for name in os.listdir(marks))
    if resumed:
        print(f"worker {me.index}: resumed from the last checkpoint", flush=True)
    open(os.path.join(marks, f"{job_id}-{me.index}"), "w").close()
    if not resumed:
        deadline = time.monotonic() + 300
        step = 0
        while time.monotonic() < deadline:  # until the slice is preempted
            print(f"worker {me.index}: step {step}: training", flush=True)
            step += 100
            time.sleep(0.5)
        raise SystemExit(1)  # never preempted: the test went away
    time.sleep(second)
    print(f"worker {me.index}: step 1000: done", flush=True)
    return "trained"
