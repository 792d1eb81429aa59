"""N deferred KineticJobTriggers in one event loop vs N per-trigger pollers.

Submits N cheap sleeping jobs on the local backend, then measures, in one asyncio loop
(as in an Airflow triggerer), for each mode over the same steady-state window:

- shared:  N ``KineticJobTrigger`` s, waiting through the core's shared poller;
- per-trigger: N coroutines that each poll their own job every interval with
  ``asyncio.to_thread(handle.state)`` (how pod triggers poll today).

Reports backend status calls per interval, CPU seconds per minute and the longest
event-loop stall, with ratios. Usage::

    .venv-airflow/bin/python bench/triggerer.py [--n 1000] [--interval 5] [--window 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kinetic_core as kc


def sleeper(seconds: float) -> None:
    time.sleep(seconds)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def stall_monitor(stop: asyncio.Event, tick: float = 0.01) -> float:
    """Longest delay past a 10 ms sleep: how long the loop was blocked."""
    loop = asyncio.get_running_loop()
    worst = 0.0
    while not stop.is_set():
        before = loop.time()
        await asyncio.sleep(tick)
        worst = max(worst, loop.time() - before - tick)
    return worst


async def measure(
    start_waiters: Callable[[], list[asyncio.Task[Any]]],
    calls: Callable[[], int],
    warmup: float,
    window: float,
) -> dict[str, float]:
    stop = asyncio.Event()
    tasks = start_waiters()
    await asyncio.sleep(warmup)  # past the adaptive first polls: steady state only
    monitor = asyncio.ensure_future(stall_monitor(stop))
    calls0, cpu0, t0 = calls(), cpu_seconds(), time.monotonic()
    await asyncio.sleep(window)
    elapsed = time.monotonic() - t0
    result = {"calls": calls() - calls0, "cpu": cpu_seconds() - cpu0, "elapsed": elapsed}
    stop.set()
    result["stall"] = await monitor
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert not any(t.done() and not t.cancelled() for t in tasks), (
        "a job finished during the benchmark"
    )
    return result


async def run_shared(
    handles: list[kc.JobHandle], interval: float, warmup: float, window: float
) -> dict[str, float]:
    from kinetic_airflow.triggers import KineticJobTrigger

    poller = kc.shared_poller()

    def start() -> list[asyncio.Task[Any]]:
        triggers = [
            KineticJobTrigger(handle=h.to_json(), poll_interval=interval, stream_logs=False)
            for h in handles
        ]
        return [asyncio.ensure_future(anext(t.run())) for t in triggers]

    return await measure(start, lambda: poller.polls, warmup, window)


async def run_per_trigger(
    handles: list[kc.JobHandle], interval: float, warmup: float, window: float
) -> dict[str, float]:
    count = [0]

    async def own_poller(handle: kc.JobHandle) -> None:
        while True:  # the baseline being measured: one poll per trigger per interval
            count[0] += 1
            state = await asyncio.to_thread(handle.state)
            if state.terminal:
                return
            await asyncio.sleep(interval)

    def start() -> list[asyncio.Task[Any]]:
        return [asyncio.ensure_future(own_poller(h)) for h in handles]

    return await measure(start, lambda: count[0], warmup, window)


def submit_all(n: int, interval: float, life: float) -> list[kc.JobHandle]:
    target = {"poll_interval": interval}
    with ThreadPoolExecutor(8) as pool:
        return list(
            pool.map(
                lambda i: kc.submit(sleeper, (life,), target=target, name=f"bench-{i}"), range(n)
            )
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--n", type=int, default=1000, help="deferred triggers / running jobs (default 1000)"
    )
    parser.add_argument("--interval", type=float, default=5.0, help="poll interval in seconds")
    parser.add_argument("--window", type=float, default=30.0, help="measured seconds per mode")
    args = parser.parse_args(argv)
    if not os.environ.get("KINETIC_STORAGE"):
        os.environ["KINETIC_STORAGE"] = "file://" + tempfile.mkdtemp(prefix="kinetic-bench-")
    warmup = 3 * args.interval
    life = 2 * (warmup + args.window) + 120
    t0 = time.monotonic()
    print(f"submitting {args.n} sleeping jobs to {os.environ['KINETIC_STORAGE']} ...", flush=True)
    handles = submit_all(args.n, args.interval, life)
    print(
        f"submitted in {time.monotonic() - t0:.1f}s; measuring {args.window:g}s per mode "
        f"after {warmup:g}s warm-up",
        flush=True,
    )
    try:
        shared = asyncio.run(run_shared(handles, args.interval, warmup, args.window))
        per = asyncio.run(run_per_trigger(handles, args.interval, warmup, args.window))
    finally:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda h: h.cleanup(), handles))

    def row(name: str, fmt: str, a: float, b: float) -> str:
        ratio = f"{b / a:.1f}x" if a > 0 else "inf"
        return f"| {name:<34} | {fmt.format(a):>12} | {fmt.format(b):>12} | {ratio:>8} |"

    intervals = [r["elapsed"] / args.interval for r in (shared, per)]
    print()
    print(f"N = {args.n} triggers, interval = {args.interval:g}s, window = {args.window:g}s")
    print(f"| {'metric':<34} | {'shared':>12} | {'per-trigger':>12} | {'ratio':>8} |")
    print(f"|{'-' * 36}|{'-' * 14}|{'-' * 14}|{'-' * 10}|")
    print(
        row(
            "backend status calls per interval",
            "{:.1f}",
            shared["calls"] / intervals[0],
            per["calls"] / intervals[1],
        )
    )
    print(
        row(
            "CPU seconds per minute",
            "{:.2f}",
            shared["cpu"] / shared["elapsed"] * 60,
            per["cpu"] / per["elapsed"] * 60,
        )
    )
    print(
        row("longest event-loop stall (ms)", "{:.1f}", shared["stall"] * 1000, per["stall"] * 1000)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
