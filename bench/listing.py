"""The newest page of ``list_jobs`` over a long history: the job index vs the full scan.

A history of ``--jobs`` ended jobs (one every 10 minutes, owners alternating, statuses
SUCCEEDED/FAILED/CANCELLED in turn) is written with the project's own writers
(``tests/core/index_helpers.py``: index entry, ``handle.json``, ``records.decide``), on
file:// and then ``--gcs-jobs`` of them on the GCS emulator of ``tests/gcs_emulator.py``.
Each listing of a page of ``--limit`` runs both ways in this one process:

- index (what ``list_jobs`` does on an indexed store, ``kinetic_core/records/job_index.py``);
- scan (the old ``list_jobs``, kept as ``listing.Query.scan`` for stores without an index:
  every ``handle.json`` read, and with a status filter every kept job's state resolved).

Printed per query: median seconds of ``--repeats``, storage requests (a counting Storage),
and the ratio scan/index. Goal: the index's requests do not grow with the history.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import kinetic_core as kc
from kinetic_core.jobs import listing
from kinetic_core.records import job_index
from kinetic_core.storage import Storage, open_storage
from kinetic_core.util.parallel import parallel
from tests.core.index_helpers import SPACING, STATUSES, CountingStorage, write_job

QUERIES: dict[str, dict[str, object]] = {
    "newest page": {},
    "owner=alice": {"owner": "alice"},
    "status=SUCCEEDED": {"statuses": {"SUCCEEDED"}},
    "since 2h, oldest first": {"since": "2h", "reverse": True},
}


def write(storage: Storage, count: int) -> None:
    """``count`` ended jobs, the newest ending now (so ``since`` finds some), in parallel."""
    start = time.time() - count * SPACING
    job_index.mark_complete(storage)  # only this version writes here (as a first listing finds)

    def one(i: int) -> None:
        write_job(
            storage,
            f"job-{i:07d}",
            start + i * SPACING,
            status=STATUSES[i % 3],
            owner="alice" if i % 2 else "bob",
        )

    parallel(one, range(count))


def timed(fn: Callable[[], list[kc.JobHandle]], repeats: int) -> tuple[float, list[str]]:
    times, ids = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ids = [h.job_id for h in fn()]
        times.append(time.perf_counter() - t0)
    return statistics.median(times), ids


def compare(uri: str, limit: int, repeats: int, scan_repeats: int) -> None:
    from kinetic_core import storage as storage_module

    real = open_storage(uri)
    counted = CountingStorage(real)
    storage_module._cache[uri] = counted  # type: ignore[assignment]
    target = kc.Target(storage=uri)
    print(f"  {'query':<24} {'index s':>9} {'req':>5} {'scan s':>9} {'req':>7} {'ratio':>8}")
    for label, filters in QUERIES.items():
        query = listing.Query.of(limit=limit, **filters)  # type: ignore[arg-type]
        counted.calls.clear()
        t_index, ids_index = timed(
            lambda f=filters: kc.list_jobs(target=target, limit=limit, **f),  # type: ignore[misc]
            repeats,
        )
        req_index = counted.total() // repeats
        counted.calls.clear()
        t_scan, ids_scan = timed(lambda q=query: q.scan(counted, None, None), scan_repeats)
        req_scan = counted.total() // scan_repeats
        same = "" if ids_index == ids_scan else "  DIFFERENT RESULTS"
        print(
            f"  {label:<24} {t_index:>9.4f} {req_index:>5} {t_scan:>9.3f} {req_scan:>7} "
            f"{t_scan / t_index:>7.0f}x{same}"
        )
    storage_module._cache[uri] = real


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--gcs-jobs", type=int, default=2_000)
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scan-repeats", type=int, default=1)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f}, {os.cpu_count()} cores")
    root = tempfile.mkdtemp(prefix="kinetic-bench-listing-")
    try:
        uri = f"file://{root}/store"
        t0 = time.perf_counter()
        write(open_storage(uri), args.jobs)
        print(f"file://: {args.jobs} jobs written in {time.perf_counter() - t0:.0f} s")
        compare(uri, args.limit, args.repeats, args.scan_repeats)
        if args.gcs_jobs:
            from gcs_emulator import BUCKET, EmulatorServer

            server = EmulatorServer().start()
            server.create_bucket(BUCKET)
            os.environ["STORAGE_EMULATOR_HOST"] = server.endpoint
            try:
                gs = f"gs://{BUCKET}/bench-listing"
                t0 = time.perf_counter()
                write(open_storage(gs), args.gcs_jobs)
                print(
                    f"gs:// (emulator): {args.gcs_jobs} jobs written in "
                    f"{time.perf_counter() - t0:.0f} s"
                )
                compare(gs, args.limit, max(1, args.repeats // 2), 1)
            finally:
                server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
