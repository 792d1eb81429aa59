"""Batch staging and launch throughput: the detached batch vs the old sequential path.

One process, fresh file:// storage per side, no-op children on the local backend:

- detached (this version): ``submit_map`` stages every child's call in parallel and starts
  the batch's driver; it returns once the batch is registered. Reported: staging rate
  (children per second until ``submit_map`` returns), launch rate (children per second
  until the driver has ticketed and launched every child; ``max_concurrency`` = n, so no
  slot waits), time until every child is terminal, and bookkeeping bytes per child
  (everything under ``batches/{group}``: manifest, markers, launch tickets).
- baseline (the old path): one thread calling ``submit(fn, (i,), idempotency_key=...)``
  per child in sequence, as the old in-process submitter did; each call stages and
  launches, so its rate is both its staging and its launch rate.

Ratios > 1 mean the detached batch is faster. Goal: 1,000 children staged in seconds.
Usage: ``python bench/batch.py [--n 1000]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def noop(i: int) -> int:
    return i


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def detached(kc: Any, n: int, root: Path) -> dict[str, float]:
    target = kc.Target(storage=f"file://{root}", poll_interval=0.5)
    t0 = time.perf_counter()
    batch = kc.submit_map(noop, range(n), target=target, max_concurrency=n)
    staged = time.perf_counter() - t0
    tickets = root / "batches" / batch.group_id / "launches"
    while len(os.listdir(tickets)) < n if tickets.exists() else True:
        time.sleep(0.02)
    launched = time.perf_counter() - t0 - staged
    statuses = batch.wait(timeout=600)
    finished = time.perf_counter() - t0
    assert all(s == "SUCCEEDED" for s in statuses), statuses
    per_child = tree_bytes(root / "batches" / batch.group_id) / n
    return {"staged_s": staged, "launched_s": launched, "finished_s": finished, "bytes": per_child}


def sequential(kc: Any, n: int, root: Path) -> dict[str, float]:
    target = kc.Target(storage=f"file://{root}", poll_interval=0.5)
    t0 = time.perf_counter()
    handles = [
        kc.submit(noop, (i,), target=target, idempotency_key=f"batch/seq/{i}") for i in range(n)
    ]
    launched = time.perf_counter() - t0
    for h in handles:
        h.wait(timeout=600)
    finished = time.perf_counter() - t0
    return {"staged_s": launched, "launched_s": launched, "finished_s": finished}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="children")
    args = parser.parse_args()
    import kinetic_core as kc

    tmp = Path(tempfile.mkdtemp(prefix="kinetic-bench-batch-"))
    try:
        new = detached(kc, args.n, tmp / "detached")
        old = sequential(kc, args.n, tmp / "sequential")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    n = args.n
    rows = [
        ("staging rate (children/s)", n / new["staged_s"], n / old["staged_s"]),
        ("launch rate (children/s)", n / new["launched_s"], n / old["launched_s"]),
        ("submit -> all terminal (s)", new["finished_s"], old["finished_s"]),
    ]
    print(f"{n} no-op children, local backend, load {os.getloadavg()[0]:.2f}")
    print(f"{'':30} {'detached':>12} {'sequential':>12} {'ratio':>8}")
    for name, a, b in rows:
        ratio = a / b if "rate" in name else b / a
        print(f"{name:30} {a:12.1f} {b:12.1f} {ratio:8.2f}x")
    print(f"{'submit_map returned after (s)':30} {new['staged_s']:12.2f}")
    print(f"{'batch bookkeeping (bytes/child)':30} {new['bytes']:12.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
