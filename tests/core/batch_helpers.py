"""Job bodies and subprocess scripts for the batch tests.

Kept import-light: every child job's runner imports this module by name
(``tests.core.batch_helpers``), and so do the helper processes the tests start.
Gates are plain files: a child blocks until the test creates its gate, which makes
"still submitting" / "still running" states deterministic without timing assumptions.
"""

from __future__ import annotations

import os
import time
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


def flaky(value: Any, marker_dir: str, always: bool = False) -> Any:
    """Fails on its first attempt per value, succeeds afterwards (never, with ``always``)."""
    if always:
        raise RuntimeError(f"{value} always fails")
    marker = os.path.join(marker_dir, f"tried-{value}")
    if not os.path.exists(marker):
        with open(marker, "w") as fh:
            fh.write(os.environ.get("KINETIC_JOB_ID", ""))
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
