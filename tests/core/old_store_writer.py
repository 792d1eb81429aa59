"""Write a small file:// store with the code of ddc7209 (before the re-layout by layer).

Why: tests/core/test_old_store.py reads the archived store with today's code, so a store
written before the move (its pickles name ``kinetic_core.data.Data``,
``kinetic_core.config.Target``, ...) must keep reading. Run with the OLD code only::

    git worktree add /tmp/old-kinetic ddc7209
    PYTHONPATH=/tmp/old-kinetic:/tmp/old-kinetic/providers \\
        /work/main/.venv/bin/python tests/core/old_store_writer.py DEST
    tar -C DEST -czf tests/core/stores/store-ddc7209.tar.gz expected.json store

It fills DEST/store (the storage root) and writes DEST/expected.json: each job's id and
what the old code read for it (status, reason, result summaries, the batch's group id).
The functions live in ``__main__``, so they travel by value and the store needs no module
of this checkout to read back.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import kinetic_core as kc

IDEMPOTENCY_KEY = "nightly/train/2026-11-21"


def make_result(n: int) -> dict[str, Any]:
    """A result naming moved classes: a Data (kinetic_core.data) and a Target (config)."""
    return {
        "n": n,
        "data": kc.Data("gs://old-bucket/sets/train/"),
        "target": kc.Target(backend="local", life_span=600),
        "plain": [1, 2.5, "three", None, {"k": (4, 5)}],
    }


def plain(n: int) -> int:
    """A plain value."""
    return n * 2


def raise_config_error() -> None:
    """A kinetic_core error class raised inside the job."""
    raise kc.errors.ConfigError("bad option inside the job")


def raise_value_error() -> None:
    """A builtin exception raised inside the job."""
    raise ValueError("learning rate too high")


def sleep(seconds: float) -> None:
    """Long enough to be cancelled while running."""
    time.sleep(seconds)


def sleep_then(seconds: float) -> str:
    """Runs long enough for a poll to see RUNNING, so history/ holds a record."""
    time.sleep(seconds)
    return "done"


def square_or_fail(x: int) -> int:
    """Batch child: input 1 fails."""
    if x == 1:
        raise ValueError(f"child {x} failed")
    return x * x


def summary(value: Any) -> Any:
    """A JSON-able summary of a result (what the reading test compares)."""
    if isinstance(value, kc.Data):
        return {"Data": value.path, "fuse": value.fuse}
    if isinstance(value, kc.Target):
        return {"Target": {"backend": value.backend, "life_span": value.life_span}}
    if isinstance(value, dict):
        return {k: summary(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [summary(v) for v in value]
    return value


def state_of(job: kc.JobHandle) -> dict[str, Any]:
    """The fields of a job's state that must read the same later."""
    state = job.state()
    return {
        "status": state.status.value,
        "reason": state.reason,
        "exit_code": state.exit_code,
        "collected": state.collected,
    }


def settle(root: Path, timeout: float = 60) -> None:
    """Wait until every local job's process (the batch driver's too) wrote its exit.json,
    so nothing is still writing into the store when it is archived."""
    deadline = time.monotonic() + timeout
    while any(
        not (launch.parent / "exit.json").exists()
        for launch in root.glob("backend-local/*/launch.json")
    ):
        if time.monotonic() > deadline:
            raise SystemExit("local jobs still running")
        time.sleep(0.2)


def main(dest: Path) -> None:
    """Submit every kind of job, wait for each to end, record what the old code reads."""
    root = dest / "store"
    uri = f"file://{root}"
    os.environ["KINETIC_STORAGE"] = uri
    os.environ.pop("KINETIC_SIGNING_KEY", None)  # signed envelopes are bound to their root
    os.environ.pop("KINETIC_BACKEND", None)
    target = kc.Target(storage=uri, backend="local")

    jobs: dict[str, kc.JobHandle] = {}
    jobs["uncollected"] = kc.submit(make_result, (7,), target=target, name="uncollected")
    jobs["collected"] = kc.submit(plain, (21,), target=target, name="collected")
    jobs["config_error"] = kc.submit(raise_config_error, target=target, name="config-error")
    jobs["value_error"] = kc.submit(raise_value_error, target=target, name="value-error")
    jobs["cancelled"] = kc.submit(sleep, (120,), target=target, name="cancelled")
    jobs["idempotent"] = kc.submit(
        plain, (5,), target=target, name="idempotent", idempotency_key=IDEMPOTENCY_KEY
    )
    jobs["history"] = kc.submit(sleep_then, (1.5,), target=target, name="history")
    batch = kc.submit_map(square_or_fail, [0, 1, 2], target=target, name="sweep")

    deadline = time.monotonic() + 60
    for name in ("cancelled", "history"):  # observed RUNNING: a history/ record
        while jobs[name].status() is not kc.JobStatus.RUNNING:
            if time.monotonic() > deadline:
                raise SystemExit(f"job {name} never started")
            time.sleep(0.1)
    assert jobs["cancelled"].cancel(), "cancel did not decide the job"
    for job in jobs.values():
        job.wait(timeout=120)
    collected_value = jobs["collected"].result()  # default cleanup: the result is gone after
    batch.wait(timeout=180)
    settle(root)

    expected: dict[str, Any] = {"storage": uri, "jobs": {}}
    for name, job in jobs.items():
        expected["jobs"][name] = {"job_id": job.job_id, **state_of(job)}
    expected["jobs"]["collected"]["result_was"] = collected_value
    # Not read back through result(): that would mark them collected (collected.json).
    expected["jobs"]["uncollected"]["result"] = summary(make_result(7))
    expected["jobs"]["idempotent"]["result"] = plain(5)
    expected["jobs"]["history"]["result"] = "done"
    expected["jobs"]["idempotent"]["idempotency_key"] = IDEMPOTENCY_KEY
    for name, kind in (("config_error", "ConfigError"), ("value_error", "ValueError")):
        try:
            jobs[name].result(cleanup=False)  # a failure leaves no collected.json
        except Exception as exc:  # the remote exception, rebuilt with its own type
            assert type(exc).__name__ == kind, exc
            expected["jobs"][name]["error"] = {
                "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
                "message": str(exc),
            }
        else:
            raise SystemExit(f"{name} did not raise")
    for name, job in jobs.items():
        expected["jobs"][name]["history"] = [[t.status.value, t.reason] for t in job.history()]

    failed = batch.failed_children()
    expected["batch"] = {
        "group_id": batch.group_id,
        "total": batch.total,
        "statuses": [s.value for s in batch.statuses()],
        "children": [j.job_id if j is not None else None for j in batch.jobs],
        "results": [square_or_fail(x) if x != 1 else None for x in (0, 1, 2)],
        "failed": {
            str(f.index): {"reason": f.reason, "error": str(kc.failure_of(f.job))}
            for f in failed
            if f.job is not None
        },
    }
    expected["listed"] = sorted(j.job_id for j in kc.list_jobs(target=target))
    expected["driver"] = sorted(
        j.job_id for j in kc.list_jobs(target=target, tags={"kinetic/batch-driver": batch.group_id})
    )
    expected["version"] = kc.__version__
    (dest / "expected.json").write_text(json.dumps(expected, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(f"usage: {sys.argv[0]} DEST")
    main(Path(sys.argv[1]).resolve())
