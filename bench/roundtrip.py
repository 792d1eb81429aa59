"""No-op round trip on the local backend: ``kinetic_core.submit(noop).result()``.

Measured side by side in one process, interleaved, medians over ``--repeats``:

- bare:     ``subprocess.run([sys.executable, "-c", "pass"])`` (the floor: one interpreter)
- kinetic:  ``kinetic_core.submit(noop, target=...).result()`` (fresh file:// storage)
- submitit: ``submitit.LocalExecutor(folder=tmp).submit(noop).result()``

Goals: kinetic <= 3x bare, and submitit / kinetic >= 5.

Then it breaks kinetic's time down (submit call, launch, job start, run+store+decide,
finished and exit records, detection latency, collect, cleanup) from the records the job writes, counts the
backend polls per round trip, and profiles the job side's imports with
``python -X importtime``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import load_avg, med

# What a local job's process imports today (supervisor, then the forked runner) ...
JOB_IMPORTS_NOW = "import kinetic_core.backends.local.supervisor, kinetic_core.runtime.runner"
# ... and the floor: cloudpickle plus the stdlib modules the runner's work really needs
# (no asyncio/inspect unless the function is async, no platform/socket/argparse/config).
JOB_IMPORTS_FLOOR = "import cloudpickle, hashlib, hmac, json, pickle, struct, threading, traceback"


def noop() -> None:
    return None


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def count_polls(backend: Any) -> list[int]:
    """Wrap ``backend.poll`` on the instance; returns a one-item counter list."""
    counter = [0]
    original = backend.poll

    def poll(job_ids: list[str]) -> Any:
        counter[0] += 1
        return original(job_ids)

    backend.poll = poll
    return counter


def time_bare() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - t0


def importtime(module: str, repeats: int) -> tuple[float, list[tuple[str, float]]]:
    """Median cumulative import time of ``module`` (s) and its heaviest direct imports."""
    totals: list[float] = []
    children: dict[str, list[float]] = {}
    line_re = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")
    for _ in range(repeats):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", f"import {module}"],
            capture_output=True,
            text=True,
            check=True,
        )
        direct: list[tuple[str, float]] = []  # importtime prints children before parents
        for line in proc.stderr.splitlines():
            m = line_re.match(line)
            if not m:
                continue
            cumulative, depth, name = int(m.group(2)) / 1e6, len(m.group(3)), m.group(4)
            if depth == 3:
                direct.append((name, cumulative))
            elif depth == 1:
                if name == module:
                    totals.append(cumulative)
                    for child, value in direct:
                        children.setdefault(child, []).append(value)
                direct = []
    top = sorted(((n, med(v)) for n, v in children.items()), key=lambda x: -x[1])[:8]
    return med(totals), top


def read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    except (FileNotFoundError, ValueError):
        return {}


def wait_for_json(path: Path, timeout: float = 10.0) -> dict[str, Any]:
    """A record another process writes a little later (empty dict if it never comes)."""
    deadline = time.monotonic() + timeout
    while not (record := read_json(path)) and time.monotonic() < deadline:
        time.sleep(0.001)
    return record


def breakdown_once(kc: Any, target: Any, root: Path, polls: list[int]) -> dict[str, float]:
    """One round trip split into phases, using the records the job side writes.

    The job reads terminal as soon as the runner decides its outcome (``outcome.json``),
    before the supervisor writes ``exit.json``: detection is measured from the outcome's
    ``at``, and the exit record is awaited after ``wait()`` (it may not exist yet then).
    """
    t0 = time.time()
    handle = kc.submit(noop, target=target)
    t1 = time.time()
    before = polls[0]
    handle.wait()
    t2 = time.time()
    wait_polls = polls[0] - before
    job_dir = root / "jobs" / handle.job_id
    launch = read_json(root / "backend-local" / handle.job_id / "launch.json")
    started = read_json(job_dir / "started.json")
    outcome = read_json(job_dir / "outcome.json")
    finished = wait_for_json(job_dir / "finished.json")
    exit_rec = wait_for_json(root / "backend-local" / handle.job_id / "exit.json")
    t2b = time.time()
    handle.result(cleanup=False)
    t3 = time.time()
    handle.cleanup()
    t4 = time.time()
    return {
        "submit() call": t1 - t0,
        "  of which launch (Popen)": launch["launched_at"] - t0,
        "job: supervisor+runner start": started["at"] - launch["launched_at"],
        "job: load call, run, store result, decide": outcome["at"] - started["at"],
        "job: decided -> finished.json": finished["at"] - outcome["at"],
        "job: finished.json -> exit.json": exit_rec["finished_at"] - finished["at"],
        "detection latency (decided -> wait returns)": t2 - outcome["at"],
        "wait() total": t2 - t1,
        "result(cleanup=False) after wait": t3 - t2b,
        "cleanup()": t4 - t3,
        "polls during wait()": float(wait_polls),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=15, help="round trips per variant")
    parser.add_argument("--warmup", type=int, default=2, help="untimed round trips per variant")
    parser.add_argument("--breakdown", type=int, default=7, help="round trips for the breakdown")
    parser.add_argument("--importtime-repeats", type=int, default=5)
    parser.add_argument("--no-submitit", action="store_true", help="skip the submitit variant")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="kinetic-bench-roundtrip-"))
    try:
        return run(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(args: argparse.Namespace, tmp: Path) -> int:
    root = tmp / "kinetic"
    os.environ["KINETIC_STORAGE"] = f"file://{root}"
    import kinetic_core as kc
    from kinetic_core.backends import get_backend

    target = kc.Target(storage=f"file://{root}")
    polls = count_polls(get_backend(target.resolve()))

    submitit_executor = None
    if not args.no_submitit:
        import submitit

        submitit_executor = submitit.LocalExecutor(folder=str(tmp / "submitit"))
        submitit_executor.update_parameters(timeout_min=10)

    def kinetic_rt() -> float:
        t0 = time.perf_counter()
        kc.submit(noop, target=target).result()
        return time.perf_counter() - t0

    def submitit_rt() -> float:
        assert submitit_executor is not None
        t0 = time.perf_counter()
        submitit_executor.submit(noop).result()
        return time.perf_counter() - t0

    variants: dict[str, Callable[[], float]] = {
        "bare python -c pass": time_bare,
        "kinetic": kinetic_rt,
    }
    if submitit_executor is not None:
        variants["submitit LocalExecutor"] = submitit_rt
    print(f"load average before: {load_avg()}  (cores: {os.cpu_count()})")
    for fn in variants.values():
        for _ in range(args.warmup):
            fn()
    samples: dict[str, list[float]] = {name: [] for name in variants}
    polls_per_rt: list[int] = []
    for _ in range(args.repeats):  # interleaved so load changes hit every variant alike
        for name, fn in variants.items():
            before = polls[0]
            samples[name].append(fn())
            if name == "kinetic":
                polls_per_rt.append(polls[0] - before)

    bare = med(samples["bare python -c pass"])
    kin = med(samples["kinetic"])
    print(f"\nRound trip, median of {args.repeats} (min..max)")
    print(f"{'variant':<26}{'median':>12}{'min':>12}{'max':>12}{'vs bare':>10}")
    for name, values in samples.items():
        m = med(values)
        print(f"{name:<26}{ms(m):>12}{ms(min(values)):>12}{ms(max(values)):>12}{m / bare:>9.2f}x")
    print(
        f"backend polls per kinetic round trip: median {med(polls_per_rt):g} "
        f"(min {min(polls_per_rt)}, max {max(polls_per_rt)}); includes the polls of "
        "result()'s cleanup"
    )
    print("\nGoals")
    ok1 = kin <= 3 * bare
    print(f"  kinetic <= 3x bare spawn:      {kin / bare:5.2f}x   {'MET' if ok1 else 'MISSED'}")
    if "submitit LocalExecutor" in samples:
        sub = med(samples["submitit LocalExecutor"])
        ok2 = sub / kin >= 5
        print(f"  submitit / kinetic >= 5x:      {sub / kin:5.2f}x   {'MET' if ok2 else 'MISSED'}")

    print(f"\nWhere kinetic's time goes (median of {args.breakdown}; wall clock across processes)")
    rows: dict[str, list[float]] = {}
    for _ in range(args.breakdown):
        for key, value in breakdown_once(kc, target, root, polls).items():
            rows.setdefault(key, []).append(value)
    for key, values in rows.items():
        value = med(values)
        text = f"{value:8.0f}" if key.startswith("polls") else ms(value)
        print(f"  {key:<44}{text:>12}")

    print(f"\nJob-side import cost (python -X importtime, median of {args.importtime_repeats})")
    bare_start = med([time_bare() for _ in range(args.importtime_repeats)])
    for module in ("kinetic_core.backends.local.supervisor", "kinetic_core.runtime.runner"):
        total, top = importtime(module, args.importtime_repeats)
        print(
            f"  import {module}: {ms(total)} cumulative (bare interpreter start {ms(bare_start)})"
        )
        for name, value in top:
            print(f"      {name:<36}{ms(value)}")
    print(f"\nJob-side startup, wall of `python -c IMPORTS`, median of {args.importtime_repeats}")
    starts = {
        "bare: pass": "pass",
        "now: supervisor + runner modules": JOB_IMPORTS_NOW,
        "floor: what the runner truly needs": JOB_IMPORTS_FLOOR,
    }
    start_rows: dict[str, list[float]] = {name: [] for name in starts}
    for _ in range(args.importtime_repeats):
        for name, code in starts.items():
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True)
            start_rows[name].append(time.perf_counter() - t0)
    for name, values in start_rows.items():
        print(f"  {name:<44}{ms(med(values))}")
    print(f"\nload average after: {load_avg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
