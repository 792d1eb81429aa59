"""1,000 concurrent async waiters on RUNNING local jobs: the shared poller vs per-waiter polling.

Real jobs: ``--jobs`` detached local jobs running ``time.sleep``. A local job costs about
20 MB of memory (a supervisor interpreter plus its forked runner), so 1,000 real jobs
need ~20 GB: by default this starts 100 real jobs and spreads the 1,000 waiters over
them (10 waiters per job; each waiter is its own ``await``, and every poll still covers
1,000 refs). ``--jobs 1000`` gives one waiter per job where memory allows.

Measured in one process, one phase after the other, same jobs, same waiters:

- shared:   each waiter ``await handle.await_()`` (the event loop's shared poller)
- baseline: each waiter loops ``await asyncio.to_thread(handle.state)``,
            ``await asyncio.sleep(interval)`` (what per-task polling costs)

Counted: ``Backend.poll`` calls per interval in steady state (the instance's ``poll`` is
wrapped; ``kinetic_core.shared_poller().polls`` too), the longest event-loop stall (the
lateness of a ticker's ``asyncio.sleep(0.01)``), and process CPU per interval.
``Target(poll_interval=1.0)`` keeps intervals short.

Goals (shared poller): 1 backend poll per interval; longest stall < 0.2 s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from common import load_avg

JOB_MB = 25  # memory per sleeping local job (measured ~20 MB PSS) plus headroom


def mem_available_mb() -> float:
    with open("/proc/meminfo") as fh:
        for line in fh:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return float("inf")


class PollCounter:
    """Wraps ``poll`` on one backend instance; records when each call started and its size."""

    def __init__(self, backend: Any) -> None:
        self.calls: list[tuple[float, float, int]] = []  # (start, duration, refs)
        original = backend.poll

        def poll(job_ids: list[str]) -> Any:
            t0 = time.perf_counter()
            try:
                return original(job_ids)
            finally:
                self.calls.append((t0, time.perf_counter() - t0, len(job_ids)))

        backend.poll = poll

    def between(self, start: float, end: float) -> list[tuple[float, float, int]]:
        return [c for c in self.calls if start <= c[0] < end]


async def ticker(stalls: list[tuple[float, float]], stop: asyncio.Event, tick: float) -> None:
    """Records (when, lateness) of every ``asyncio.sleep(tick)``: the event loop's stalls."""
    while not stop.is_set():
        t0 = time.perf_counter()
        await asyncio.sleep(tick)
        now = time.perf_counter()
        stalls.append((now, now - t0 - tick))


async def phase(
    name: str,
    handles: list[Any],
    waiter: Callable[[Any], Awaitable[Any]],
    counter: PollCounter,
    args: argparse.Namespace,
) -> dict[str, Any]:
    stalls: list[tuple[float, float]] = []
    stop = asyncio.Event()
    tick = asyncio.create_task(ticker(stalls, stop, args.tick))
    await asyncio.sleep(0.2)
    t_register = time.perf_counter()
    tasks = [asyncio.create_task(waiter(handles[i % len(handles)])) for i in range(args.waiters)]
    await asyncio.sleep(args.warmup)
    t0, cpu0 = time.perf_counter(), time.process_time()
    await asyncio.sleep(args.measure)
    t1, cpu1 = time.perf_counter(), time.process_time()
    finished = sum(t.done() for t in tasks)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    stop.set()
    await tick
    window = counter.between(t0, t1)
    intervals = (t1 - t0) / args.interval
    return {
        "name": name,
        "polls_per_interval": len(window) / intervals,
        "refs_per_poll": statistics.median([c[2] for c in window]) if window else 0,
        "poll_ms": statistics.median([c[1] for c in window]) * 1000 if window else 0.0,
        "stall_window": max((s for w, s in stalls if t0 <= w < t1), default=0.0),
        "stall_all": max((s for w, s in stalls if w >= t_register), default=0.0),
        "cpu_per_interval": (cpu1 - cpu0) / intervals,
        "finished_early": finished,
    }


async def shared_phase(handles: list[Any], counter: PollCounter, args: argparse.Namespace) -> Any:
    import kinetic_core as kc

    result = await phase("shared poller", handles, lambda h: h.await_(), counter, args)
    result["shared_poller_polls"] = kc.shared_poller().polls
    return result


async def per_waiter_phase(
    handles: list[Any], counter: PollCounter, args: argparse.Namespace
) -> Any:
    async def loop(handle: Any) -> None:
        while True:
            state = await asyncio.to_thread(handle.state)
            if state.terminal:
                return
            await asyncio.sleep(args.interval)

    return await phase("per-waiter polling", handles, loop, counter, args)


def wait_started(root: Path, handles: list[Any], timeout: float) -> None:
    """Until every job's runner has recorded its start (so launch load has passed)."""
    deadline = time.monotonic() + timeout
    pending = list(handles)
    while pending:
        pending = [h for h in pending if not (root / "jobs" / h.job_id / "started.json").exists()]
        if pending and time.monotonic() > deadline:
            raise SystemExit(f"{len(pending)} jobs did not start within {timeout:g}s")
        time.sleep(0.2)


def stop_jobs(root: Path, handles: list[Any]) -> None:
    """Cancel every job, wait for its supervisor to record the exit, reap it, clean up."""
    pids = []
    for h in handles:
        launch = root / "backend-local" / h.job_id / "launch.json"
        with contextlib.suppress(FileNotFoundError, ValueError):
            pids.append(json.loads(launch.read_text())["pid"])
        try:
            h.cancel()
        except Exception as exc:
            print(f"cancel {h.job_id}: {exc}", file=sys.stderr)
    deadline = time.monotonic() + 30
    for h in handles:
        while not (root / "backend-local" / h.job_id / "exit.json").exists():
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
    for pid in pids:  # the supervisors are this process's children: reap them
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    for h in handles:
        try:
            h.cleanup(cancel=True)
        except Exception as exc:
            print(f"cleanup {h.job_id}: {exc}", file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--waiters", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=100, help="real sleeping jobs (<= waiters)")
    parser.add_argument("--interval", type=float, default=1.0, help="Target.poll_interval")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before measuring")
    parser.add_argument("--measure", type=float, default=15.0, help="seconds measured per phase")
    parser.add_argument("--tick", type=float, default=0.01, help="stall ticker sleep")
    args = parser.parse_args()
    args.jobs = min(args.jobs, args.waiters)
    need = args.jobs * JOB_MB
    if need > 0.6 * mem_available_mb():
        raise SystemExit(
            f"{args.jobs} jobs need ~{need} MB; only {mem_available_mb():.0f} MB "
            "available. Use fewer --jobs (waiters are spread over them)."
        )
    tmp = Path(tempfile.mkdtemp(prefix="kinetic-bench-poller-"))
    handles: list[Any] = []
    try:
        return run(args, tmp, handles)
    finally:
        if handles:
            stop_jobs(tmp / "kinetic", handles)
        shutil.rmtree(tmp, ignore_errors=True)


def run(args: argparse.Namespace, tmp: Path, handles: list[Any]) -> int:
    root = tmp / "kinetic"
    os.environ["KINETIC_STORAGE"] = f"file://{root}"
    import kinetic_core as kc
    from kinetic_core.backends import get_backend

    run_for = args.warmup + args.measure
    target = kc.Target(
        storage=f"file://{root}", poll_interval=args.interval, life_span=4 * run_for + 300
    )  # a safety net should cleanup not run
    print(f"load average before: {load_avg()}  (cores: {os.cpu_count()})")
    t0 = time.perf_counter()
    for _ in range(args.jobs):
        handles.append(kc.submit(time.sleep, (10 * run_for + 600,), target=target))
    t1 = time.perf_counter()
    wait_started(root, handles, timeout=300)
    t2 = time.perf_counter()
    print(
        f"submitted {args.jobs} real sleeping jobs in {t1 - t0:.1f} s; all running after "
        f"{t2 - t0:.1f} s; {args.waiters} waiters spread over them "
        f"({args.waiters / args.jobs:g} per job)"
    )
    time.sleep(2.0)  # let the launch load settle

    counter = PollCounter(get_backend(target.resolve()))
    shared = asyncio.run(shared_phase(handles, counter, args))
    baseline = asyncio.run(per_waiter_phase(handles, counter, args))
    if shared["finished_early"] or baseline["finished_early"]:
        print("WARNING: some waiters finished: jobs were not all RUNNING", file=sys.stderr)

    print(
        f"\n{args.waiters} waiters, poll_interval={args.interval:g}s, "
        f"steady state over {args.measure:g}s after {args.warmup:g}s warm-up"
    )
    header = (
        f"{'variant':<22}{'polls/interval':>15}{'refs/poll':>11}{'poll ms':>9}"
        f"{'max stall':>11}{'(incl. reg.)':>13}{'CPU s/interval':>16}"
    )
    print(header)
    for r in (shared, baseline):
        print(
            f"{r['name']:<22}{r['polls_per_interval']:>15.2f}{r['refs_per_poll']:>11.0f}"
            f"{r['poll_ms']:>9.1f}{r['stall_window']:>10.3f}s{r['stall_all']:>12.3f}s"
            f"{r['cpu_per_interval']:>16.3f}"
        )
    ratio = baseline["polls_per_interval"] / max(shared["polls_per_interval"], 1e-9)
    print(
        f"shared_poller().polls (resolve_states calls) in the shared phase: "
        f"{shared['shared_poller_polls']} over {args.warmup + args.measure:g}s incl. warm-up"
    )
    print(
        f"backend polls: baseline / shared = {ratio:.0f}x; CPU: baseline / shared = "
        f"{baseline['cpu_per_interval'] / max(shared['cpu_per_interval'], 1e-9):.1f}x"
    )
    print("\nGoals (shared poller)")
    ok1 = shared["polls_per_interval"] <= 1.05
    ok2 = shared["stall_all"] < 0.2
    print(
        f"  1 backend poll per interval: {shared['polls_per_interval']:.2f}   "
        f"{'MET' if ok1 else 'MISSED'}"
    )
    print(
        f"  longest stall < 0.2 s:       {shared['stall_all']:.3f} s (incl. registration)   "
        f"{'MET' if ok2 else 'MISSED'}"
    )
    print(f"\nload average after: {load_avg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
