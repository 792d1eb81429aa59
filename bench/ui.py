"""The dashboard's first page over 10,000 jobs vs ``kinetic jobs list --json`` on the same store.

One process, one fresh file:// storage root. The store is written directly with the
project's own writers, not by running 10,000 jobs: per job ``JobHandle.record()`` as
``handle.json`` and the runner's outcome record (``records.decide``, as a finished runner
writes it), 90% SUCCEEDED and 10% FAILED, with a tag on every tenth. No process runs: the
figures are listing plus state resolution from storage, which is what a page costs.

Timed (median of ``--repeats``, after one warm-up that fills the OS page cache):

- dashboard HTML: ``GET /`` through the real Starlette app (``TestClient``, in process):
  one ``list_jobs(limit=51)`` and the state resolution of the 50 jobs shown;
- dashboard JSON: ``GET /api/jobs``, what the page fetches every 2 s;
- CLI: ``kinetic jobs list --json`` (``kinetic_core.cli.run``, in process, stdout
  discarded), the same page of 50 jobs; and once as a fresh subprocess (with interpreter
  start) for scale.

Ratios are dashboard / CLI (1.0: the page costs what the CLI costs). Goal: first page
< 1 s. Listing reads every ``handle.json`` (10,000 files) for one page: that scan is the
cost both sides share, to be replaced by the storage index (issue 23).
Usage: ``python bench/ui.py [--jobs 10000 --repeats 5]``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kinetic_core as kc
from kinetic_core.jobs.handle import JobHandle
from kinetic_core.records import layout
from kinetic_core.records.lifecycle import BY_RUNNER, decide
from kinetic_core.storage import open_storage


def write_store(uri: str, count: int) -> None:
    """``count`` finished jobs, as a submitter and a runner would have recorded them."""
    storage = open_storage(uri)
    target = kc.Target(storage=uri).resolve().to_dict()
    base = time.time() - count

    def one(i: int) -> None:
        handle = JobHandle(
            job_id=f"bench-{i:06d}-{os.urandom(3).hex()}",
            storage=uri,
            target=target,
            name="train" if i % 3 else "evaluate",
            created_at=base + i,
            tags={"team": "ml"} if i % 10 == 0 else {},
            owner="bench",
        )
        storage.write_bytes(layout.job_file(handle.job_id, layout.HANDLE), handle.record())
        failed = i % 10 == 7
        decide(
            storage,
            handle.job_id,
            "FAILED" if failed else "SUCCEEDED",
            "Error" if failed else None,
            "ValueError: bad input" if failed else None,
            by=BY_RUNNER,
            exit_code=1 if failed else 0,
        )

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(count)))


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm-up: page cache, imports
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    from starlette.testclient import TestClient

    from kinetic_core.cli import app as cli_app
    from kinetic_core.ui import create_app

    tmp = Path(tempfile.mkdtemp(prefix="kinetic-bench-ui-"))
    uri = f"file://{tmp / 'store'}"
    try:
        t0 = time.perf_counter()
        write_store(uri, args.jobs)
        print(f"store: {args.jobs} jobs written in {time.perf_counter() - t0:.1f} s at {uri}")
        client = TestClient(create_app(uri))

        def html() -> None:
            response = client.get("/")
            assert response.status_code == 200 and response.text.count("<tr data-job-id") == 50

        def api() -> None:
            response = client.get("/api/jobs")
            assert response.status_code == 200 and response.json()["count"] == 50

        def cli() -> None:
            with contextlib.redirect_stdout(io.StringIO()) as out:
                code = cli_app.run(["--storage", uri, "jobs", "list", "--json"])
            assert code == 0 and len(json.loads(out.getvalue())) == 50

        figures = {
            "dashboard HTML (GET /)": median_seconds(html, args.repeats),
            "dashboard JSON (GET /api/jobs)": median_seconds(api, args.repeats),
        }
        baseline = median_seconds(cli, args.repeats)
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "kinetic_core.cli", "--storage", uri, "jobs", "list", "--json"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        fresh = time.perf_counter() - t0

        print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"{'first page of 50 over ' + str(args.jobs) + ' jobs':<44} {'s':>8} {'/ CLI':>8}")
        for name, seconds in figures.items():
            print(f"{name:<44} {seconds:8.3f} {seconds / baseline:8.2f}x")
        print(f"{'kinetic jobs list --json (in process)':<44} {baseline:8.3f} {1:8.2f}x")
        print(f"{'kinetic jobs list --json (fresh process)':<44} {fresh:8.3f}")
        worst = max(figures.values())
        print(f"goal: first page < 1 s: {'met' if worst < 1 else 'NOT met'} ({worst:.3f} s)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
