"""N deferred KineticJobTriggers in one event loop vs N per-trigger pollers.

Submits N cheap sleeping jobs on the local backend, then measures, in one asyncio loop
(as in an Airflow triggerer), for each mode over the same steady-state window:

- shared:  N ``KineticJobTrigger`` s, waiting through the core's shared poller;
- per-trigger: N coroutines that each poll their own job every interval with
  ``asyncio.to_thread(handle.state)`` (how pod triggers poll today).

Reports backend status calls per interval, CPU seconds per minute and the longest
event-loop stall, with ratios. Usage::

    .venv-airflow/bin/python bench/triggerer.py [--n 1000] [--interval 5] [--window 30]

``--scripted`` (issue 23): 5,000 deferred triggers do not fit in memory as real local jobs
(~20-30 MB each), so their jobs run on the tests' scripted backend
(``tests/core/scripted_backend.py``: real storage records, status resolution and shared
poller; the backend reports the phase the benchmark sets). Side by side for
``--n 5000`` and ``--compare 1000`` (Airflow's default triggerer capacity,
``[triggerer] capacity``), each in a fresh subprocess: triggers created one at a time
as Airflow's ``TriggerRunner`` does, memory per trigger, CPU per minute while all wait,
then every job ends (outcome and finished record written as a runner does, from another
process, as runners are) spread over ``--spread`` seconds: p50/p99/max lag from a job's
end to its trigger's event, the longest event-loop stall, CPU during the wave. Goals:
p99 lag < 1 s and no stall > 0.2 s. ``full collection`` is what one full collection of
the process's heap costs (``gc.collect()``, timed) with nothing kinetic in it and with N
triggers waiting: CPython's collector stops every thread for that long whenever it runs.
``--gc-freeze`` (issue 37) runs N once more beside it with ``gc.freeze()`` called after the
triggerer's start-up (Airflow and the provider imported, no trigger yet), what an operator
can do (docs/airflow.md, "Scale"): the collector then leaves that heap alone.
Run from the repository root with ``PYTHONPATH=$PWD:$PWD/providers``::

    .venv-airflow/bin/python bench/triggerer.py --scripted [--n 5000 --compare 1000 --interval 0.5]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import resource
import statistics
import subprocess
import sys
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


# ---- --scripted: 5,000 triggers over the scripted backend ------------------------------------


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


def timed_collection() -> float:
    """Seconds one full collection of this process's heap takes."""
    t0 = time.perf_counter()
    gc.collect()
    return time.perf_counter() - t0


class FullCollections:
    """The collector's own full (generation 2) collections while armed, from
    ``gc.callbacks``: how many, and how long each took in wall time and in CPU time of the
    thread that ran it (the CPU time does not grow with the machine's load)."""

    def __init__(self) -> None:
        self.walls: list[float] = []
        self.cpus: list[float] = []
        self.armed = True
        self._began: tuple[float, float] | None = None

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2 or not self.armed:
            return
        if phase == "start":
            self._began = (time.perf_counter(), time.thread_time())
        elif self._began is not None:
            wall, cpu = self._began
            self.walls.append(time.perf_counter() - wall)
            self.cpus.append(time.thread_time() - cpu)
            self._began = None


def submit_scripted(n: int, interval: float) -> list[kc.JobHandle]:
    from kinetic_core.util import registry

    registry.BACKENDS["scripted"] = "tests.core.scripted_backend:KIND"
    target = {"backend": "scripted", "poll_interval": interval}
    with ThreadPoolExecutor(4) as pool:
        return list(
            pool.map(lambda i: kc.submit(sleeper, (0,), target=target, name=f"t-{i}"), range(n))
        )


def end_jobs(storage_uri: str, job_ids: list[str], spread: float) -> dict[str, float]:
    """End every job as its runner would (outcome, then finished record), in random order
    spread evenly over ``spread`` seconds; when each ended. Runs in its own process
    (``--end-jobs``): runners are other processes, and 5,000 record writes in the
    triggerer's process would take its GIL and measure the benchmark, not the waits."""
    from kinetic_core.records import layout
    from kinetic_core.records.lifecycle import BY_RUNNER, decide, write_record
    from kinetic_core.storage import open_storage

    order = list(job_ids)
    random.Random(1).shuffle(order)
    storage = open_storage(storage_uri)
    ended = {}
    t0 = time.monotonic()
    for i, job_id in enumerate(order):
        delay = t0 + spread * i / len(order) - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        decide(storage, job_id, "SUCCEEDED", None, None, by=BY_RUNNER, exit_code=0)
        ended[job_id] = time.time()  # the job reads terminal from now on
        write_record(storage, job_id, layout.FINISHED, event="finished", success=True)
    return ended


async def end_jobs_elsewhere(handles: list[kc.JobHandle], spread: float) -> dict[str, float]:
    """``end_jobs`` in a child process; the backend then shows each job exited."""
    from kinetic_core.backends import BackendState
    from tests.core.scripted_backend import ScriptedBackend

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump({"storage": handles[0].storage, "job_ids": [h.job_id for h in handles]}, fh)
    argv = [sys.executable, __file__, "--end-jobs", fh.name, "--spread", str(spread)]
    child = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
    out, _ = await child.communicate()
    os.unlink(fh.name)
    if child.returncode:
        raise SystemExit(f"the process ending the jobs failed ({child.returncode})")
    ended: dict[str, float] = json.loads(out)
    for job_id in ended:
        ScriptedBackend.phases[job_id] = BackendState("exited", exit_code=0)
    return ended


async def scripted_run(
    n: int, interval: float, window: float, spread: float, freeze: bool = False
) -> dict[str, Any]:
    from kinetic_airflow.triggers import KineticJobTrigger

    gc_empty = timed_collection()  # Airflow imported, nothing of kinetic's held yet
    if freeze:  # the start-up heap out of every later collection
        gc.freeze()
    t0 = time.monotonic()
    handles = submit_scripted(n, interval)
    submit_s = time.monotonic() - t0
    collections = FullCollections()  # from registering to the last event
    gc.callbacks.append(collections)
    poller = kc.shared_poller()
    fired: dict[str, float] = {}

    async def one(trigger: KineticJobTrigger, job_id: str) -> None:
        event = await anext(trigger.run())
        fired[job_id] = time.time()
        assert event.payload["status"] == "success", event.payload

    rss0 = rss_mb()
    stop = asyncio.Event()
    monitor = asyncio.ensure_future(stall_monitor(stop))
    tasks = []
    for h in handles:  # as Airflow's TriggerRunner.create_triggers: one at a time, yielding
        await asyncio.sleep(0)
        trigger = KineticJobTrigger(handle=h.to_json(), poll_interval=interval, stream_logs=False)
        tasks.append(asyncio.create_task(one(trigger, h.job_id)))
    await asyncio.sleep(max(3 * interval, 2.0))  # registered, past the fast first polls
    stop.set()
    register_stall = await monitor
    rss1 = rss_mb()
    stop = asyncio.Event()
    monitor = asyncio.ensure_future(stall_monitor(stop))
    polls0, cpu0, w0 = poller.polls, cpu_seconds(), time.monotonic()
    await asyncio.sleep(window)
    steady_s = time.monotonic() - w0
    steady = {"cpu": cpu_seconds() - cpu0, "polls": poller.polls - polls0}
    stop.set()
    steady_stall = await monitor
    assert not fired, "a trigger fired before its job ended"
    collections.armed = False  # the timed one is not the collector's own
    gc_full = timed_collection()  # outside the stall windows
    collections.armed = True
    stop = asyncio.Event()
    monitor = asyncio.ensure_future(stall_monitor(stop))
    cpu0, w0 = cpu_seconds(), time.monotonic()
    ender = asyncio.ensure_future(end_jobs_elsewhere(handles, spread))
    _, pending = await asyncio.wait(tasks, timeout=spread + 120 * max(1.0, interval))
    for task in pending:  # reported as not fired in time
        task.cancel()
    wave_s = time.monotonic() - w0
    wave_cpu = cpu_seconds() - cpu0
    stop.set()
    wave_stall = await monitor
    ended = await ender
    gc.callbacks.remove(collections)
    lags = sorted(fired[j] - ended[j] for j in ended if j in fired)
    lags += [float("inf")] * (len(ended) - len(lags))  # not fired within the wait
    return {
        "n": n,
        "unfired": len(pending),
        "submit_s": submit_s,
        "mem_per_trigger_kb": (rss1 - rss0) * 1024 / n,
        "steady_cpu_per_min": steady["cpu"] / steady_s * 60,
        "polls_per_interval": steady["polls"] / (steady_s / interval),
        "p50": statistics.median(lags),
        "p99": lags[min(len(lags) - 1, int(0.99 * len(lags)))],
        "max_lag": lags[-1],
        "stall_register": register_stall,
        "stall_steady": steady_stall,
        "stall_wave": wave_stall,
        "wave_cpu_per_min": wave_cpu / wave_s * 60,
        "gc_empty": gc_empty,
        "gc_full": gc_full,
        "frozen": gc.get_freeze_count(),
        "full_collections": len(collections.walls),
        "full_wall_max": max(collections.walls, default=0.0),
        "full_cpu_max": max(collections.cpus, default=0.0),
        "freeze": freeze,
    }


def scripted_child(args: argparse.Namespace) -> int:
    import logging

    # The triggers' two info lines per job go nowhere here (a triggerer ships them to
    # the task log): 10,000 lines on stdout would measure the terminal, not the waits.
    logging.getLogger("kinetic_airflow").setLevel(logging.WARNING)
    storage = tempfile.mkdtemp(prefix="kinetic-bench-trig-")
    os.environ["KINETIC_STORAGE"] = "file://" + storage
    try:
        result = asyncio.run(
            scripted_run(args.n, args.interval, args.window, args.spread, args.freeze)
        )
    finally:
        import shutil

        shutil.rmtree(storage, ignore_errors=True)
    print(json.dumps(result))
    return 0


def scripted_main(args: argparse.Namespace) -> int:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"scripted backend (tests/core/scripted_backend.py: {args.n} real local jobs would "
        f"need ~{args.n * 25 / 1024:.0f} GB); interval {args.interval:g}s, steady window "
        f"{args.window:g}s, jobs end over {args.spread:g}s; load average {load} "
        f"(cores: {os.cpu_count()})",
        flush=True,
    )
    results = []
    runs = [(args.compare, False), (args.n, False)] + [(args.n, True)] * args.gc_freeze
    for n, freeze in runs:
        argv = [sys.executable, __file__, "--scripted-child", "--n", str(n)]
        argv += ["--interval", str(args.interval), "--window", str(args.window)]
        argv += ["--spread", str(args.spread)] + ["--freeze"] * freeze
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        if proc.returncode:
            raise SystemExit(f"N={n} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    rows = [
        ("submit (setup, not measured)", "submit_s", "{:.1f} s"),
        ("memory per trigger", "mem_per_trigger_kb", "{:.1f} KB"),
        ("backend polls per interval (steady)", "polls_per_interval", "{:.2f}"),
        ("CPU seconds per minute (steady)", "steady_cpu_per_min", "{:.2f}"),
        ("CPU seconds per minute (during the ends)", "wave_cpu_per_min", "{:.2f}"),
        ("lag job end -> event, p50", "p50", "{:.3f} s"),
        ("lag job end -> event, p99", "p99", "{:.3f} s"),
        ("lag job end -> event, max", "max_lag", "{:.3f} s"),
        ("triggers not fired within the wait", "unfired", "{:d}"),
        ("longest stall: registering", "stall_register", "{:.3f} s"),
        ("longest stall: steady", "stall_steady", "{:.3f} s"),
        ("longest stall: during the ends", "stall_wave", "{:.3f} s"),
        ("full collection, Airflow imported, no triggers", "gc_empty", "{:.3f} s"),
        ("full collection, N triggers waiting", "gc_full", "{:.3f} s"),
        ("the collector's full collections, whole run", "full_collections", "{:d}"),
        ("  the longest of them, wall", "full_wall_max", "{:.3f} s"),
        ("  the longest of them, CPU of its thread", "full_cpu_max", "{:.3f} s"),
        ("objects frozen by gc.freeze()", "frozen", "{:d}"),
    ]
    heads = [f"N={r['n']}" + (" gc.freeze()" if r["freeze"] else "") for r in results]
    print("\n| " + " | ".join([f"{'metric':<46}", *(f"{h:>18}" for h in heads)]) + " |")
    print("|" + "|".join(["-" * 48, *(["-" * 20] * len(heads))]) + "|")
    for name, key, fmt in rows:
        cells = (f"{fmt.format(r[key]):>18}" for r in results)
        print("| " + " | ".join([f"{name:<46}", *cells]) + " |")
    for head, b in list(zip(heads, results, strict=True))[1:]:
        worst_stall = max(b["stall_register"], b["stall_steady"], b["stall_wave"])
        print(f"\nGoals ({head})")
        print(f"  p99 lag < 1 s:      {b['p99']:.3f} s   {'MET' if b['p99'] < 1 else 'MISSED'}")
        print(
            f"  no stall > 0.2 s:   {worst_stall:.3f} s   "
            f"{'MET' if worst_stall <= 0.2 else 'MISSED'}"
        )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--n", type=int, default=1000, help="deferred triggers / running jobs (default 1000)"
    )
    parser.add_argument("--interval", type=float, default=5.0, help="poll interval in seconds")
    parser.add_argument("--window", type=float, default=30.0, help="measured seconds per mode")
    parser.add_argument(
        "--scripted", action="store_true", help="N triggers on the scripted backend (see above)"
    )
    parser.add_argument("--compare", type=int, default=1000, help="--scripted: the smaller N")
    parser.add_argument("--spread", type=float, default=10.0, help="--scripted: ends over (s)")
    parser.add_argument(
        "--gc-freeze",
        action="store_true",
        help="--scripted: N once more with gc.freeze() after start-up, side by side",
    )
    parser.add_argument("--freeze", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--scripted-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--end-jobs", metavar="JOBS_JSON", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.scripted_child:
        return scripted_child(args)
    if args.end_jobs:
        with open(args.end_jobs) as fh:
            jobs = json.load(fh)
        print(json.dumps(end_jobs(jobs["storage"], jobs["job_ids"], args.spread)))
        return 0
    if args.scripted:
        return scripted_main(args)
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
            list(pool.map(lambda h: h.cleanup(cancel=True), handles))

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
