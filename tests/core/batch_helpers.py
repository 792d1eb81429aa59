"""Job bodies and subprocess scripts for the batch tests.

Kept import-light: every child job's runner imports this module by name
(``tests.core.batch_helpers``), and so do the helper processes the tests start.
Gates are plain files: a child blocks until the test creates its gate, which makes
"still submitting" / "still running" states deterministic without timing assumptions.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

GATE_LIMIT = 120.0  # a gated child never outlives a broken test by much


def square_or_fail(x: int) -> int:
    """Inputs ending in 7 fail (20 of the first 200)."""
    if x % 10 == 7:
        raise ValueError(f"input {x} is bad")
    return x * x


def describe(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """Shows how an input item was turned into a call."""
    return {"args": list(args), "kwargs": kwargs}


def wait_for(path: str) -> None:
    deadline = time.monotonic() + GATE_LIMIT
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)


def gated(
    value: Any, gate: str | None = None, then_sleep: float = 0.0, slots: str | None = None
) -> Any:
    """Return ``value`` once ``gate`` exists (at once without a gate), after ``then_sleep``.

    With ``slots`` (a directory), the child holds a file there while it runs and records
    how many children were running at its start in ``{slots}.seen-{value}``."""
    held = os.path.join(slots, str(value)) if slots else None
    if held is not None:
        open(held, "w").close()
        with open(f"{slots}.seen-{value}", "w") as fh:
            fh.write(str(len(os.listdir(slots))))
    try:
        if gate is not None:
            wait_for(gate)
        time.sleep(then_sleep)
        return value
    finally:
        if held is not None:
            os.unlink(held)


def slotted(value: Any, slots: str, then_sleep: float = 0.2, fail: int | None = None) -> Any:
    """A child that records itself: one line per run in ``{slots}.runs`` (``value pid
    start``), and how many children held a slot when it started in
    ``{slots}.seen-{value}-{pid}``. Input ``fail`` raises (after recording its run)."""
    with open(f"{slots}.runs", "a") as fh:
        fh.write(f"{value} {os.getpid()} {time.time()}\n")
    held = os.path.join(slots, f"{value}-{os.getpid()}")
    open(held, "w").close()
    try:
        with open(f"{slots}.seen-{value}-{os.getpid()}", "w") as fh:
            fh.write(str(len(os.listdir(slots))))
        if value == fail:
            raise RuntimeError(f"child {value} fails on purpose")
        time.sleep(then_sleep)
        return value
    finally:
        os.unlink(held)


def runs(slots: str) -> list[tuple[int, float]]:
    """(value, start time) of every run ``slotted`` recorded."""
    try:
        with open(f"{slots}.runs") as fh:
            rows = [line.split() for line in fh if line.strip()]
    except FileNotFoundError:
        return []
    return [(int(v), float(t)) for v, _, t in rows]


def most_seen(slots: str) -> int:
    """The most children holding a slot at once, as the children themselves saw it."""
    folder = os.path.dirname(slots) or "."
    prefix = os.path.basename(slots) + ".seen-"
    seen = [
        int(Path(folder, n).read_text() or 0) for n in os.listdir(folder) if n.startswith(prefix)
    ]
    return max(seen, default=0)


def chatty(value: int, lines: int) -> int:
    for i in range(lines):
        print(f"line {i} of {value}", flush=True)
    return value


def flaky(value: Any, marker_dir: str, always: bool = False, gate: str | None = None) -> Any:
    """Fails on its first attempt per value, succeeds afterwards (never, with ``always``).
    With ``gate``, the first attempt fails only once that file exists (at most 60 s)."""
    if always:
        raise RuntimeError(f"{value} always fails")
    marker = os.path.join(marker_dir, f"tried-{value}")
    if not os.path.exists(marker):
        with open(marker, "w") as fh:
            fh.write(os.environ.get("KINETIC_JOB_ID", ""))
        deadline = time.monotonic() + 60
        while gate is not None and not os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.05)
        raise RuntimeError(f"first attempt of {value} fails")
    return value


def fail_while(value: Any, flag: str | None = None) -> Any:
    """Fails while ``flag`` exists: a transient outage the test can end."""
    if flag is not None and os.path.exists(flag):
        raise RuntimeError(f"{unwrap(value)}: outage")
    return unwrap(value)


class Picky:
    """An input that refuses to be pickled while ``Picky.broken`` is set (in the
    submitting process only): a deterministic submission failure for one child."""

    broken = False

    def __init__(self, value: Any) -> None:
        self.value = value

    def __reduce__(self) -> Any:
        if Picky.broken:
            raise TypeError("Picky inputs cannot be pickled right now")
        return (Picky, (self.value,))


def unwrap(item: Any) -> Any:
    return item.value if isinstance(item, Picky) else item


# ---- scripts run with ``python -c`` by the tests (cwd and PYTHONPATH: the repo root) ------

SUBMITTER = r"""
import json, sys
import kinetic_core as kc
from tests.core import batch_helpers as h

storage, spec = sys.argv[1], json.loads(sys.argv[2])
fn = getattr(h, spec.pop("fn"))
inputs = spec.pop("inputs")
batch = kc.submit_map(fn, inputs, target=kc.Target(storage=storage), **spec)
print(json.dumps({"group_id": batch.group_id}), flush=True)
batch.wait_submitted()
print(json.dumps({"submitter": "finished"}), flush=True)
"""

ATTACHER = r"""
import json, sys
import kinetic_core as kc

storage, group_id = sys.argv[1], sys.argv[2]
batch = kc.attach_batch(group_id, target=kc.Target(storage=storage), poll_timeout=120)

def observe(**extra):
    statuses = batch.statuses()
    submitted = sum(s not in ("UNSUBMITTED", "SUBMIT_FAILED") for s in statuses)
    print(json.dumps({"submitted": submitted, "unsubmitted": statuses.count("UNSUBMITTED"),
                      "submit_failed": statuses.count("SUBMIT_FAILED"), **extra}), flush=True)

observe(first=True)
for job in batch.as_completed(timeout=120):
    observe(done=int(job.tags["kinetic/index"]))
print(json.dumps({"final": batch.statuses(), "complete": batch.submission_complete}), flush=True)
"""

SUBMIT_AND_EXIT = r"""
import json, sys, time
import kinetic_core as kc
from tests.core import batch_helpers as h

storage, spec, linger = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] == "linger"
fn = getattr(h, spec.pop("fn"))
inputs = spec.pop("inputs")
batch = kc.submit_map(fn, inputs, target=kc.Target(storage=storage), **spec)
print(json.dumps({"group_id": batch.group_id}), flush=True)
if linger:
    time.sleep(600)  # the test SIGKILLs it right after submit_map returned
"""

DRIVER = r"""
import sys
from kinetic_core.batch.driver import drive_batch

print(drive_batch(sys.argv[2], sys.argv[1]), flush=True)
"""
