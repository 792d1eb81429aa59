"""What the Slurm backend costs over bare Slurm, on the private test cluster of ``tests/slurm``.

Started here (its own munge, controller and four ``slurmd``; stopped by PID at the end).

(a) A no-op job, ``--repeats`` times, the two variants in turn (the order rotates each
repetition), the same interpreter (this one):

- kinetic: ``kc.submit(noop, target=Target(backend="slurm", ...))``, then ``state()``
  every ``--tick`` seconds;
- bare: ``sbatch --parsable --wrap "<python> -c pass"``, then ``squeue -j ID -t all``
  every ``--tick`` seconds (the fairest end signal: ``sbatch --wait`` sleeps 2 s, then
  8 s, between its own checks, which would penalise the baseline; the output file
  exists before the job ends).

Both are observed at the same cadence by the same loop. "submit -> running": from the
submit call to the first observation of the job started (kinetic RUNNING or later; Slurm
R, CG or an ended state: a no-op may end between two observations). "submit -> result":
to the job seen ended (Slurm COMPLETED; kinetic SUCCEEDED) plus, for kinetic,
``result(cleanup=False)`` returning the value; the cleanup that ``result()`` runs by
default before it returns (``scancel`` of a batch job still exiting, and Slurm's
confirmation) is timed apart and shown added. Slurm schedules on its own cadence (a
pending job waits up to ~3 s for a scheduling pass here, and a job's end starts one), so
each submit comes after a ``--settle`` pause: neither variant rides the other's pass.

(b) ``--jobs`` (1,000) kinetic jobs held pending by Slurm itself: submitted with
``sbatch_args=["--begin=now+3600"]`` (real Slurm jobs, pending with reason BeginTime;
nothing runs, so 2 cores carry them), then one waiter on all of them, first the async
shared poller (``--jobs`` awaits of ``handle.await_()``), then one sync wait
(``wait_states`` on every ref: what ``handle.wait()`` runs). Counted by wrapping the CLI
boundary (``kinetic_core/backends/slurm/cli.py``: every squeue, scontrol, sacct and sbatch
the backend runs) over ``--measure`` seconds after ``--warmup``: invocations per poll
interval. Goal: one ``squeue`` per interval, whatever the number of jobs. The baseline
(one ``squeue -j`` per job per interval) is not run (1,000 commands a second would
swamp the machine): its cost is one such command's median time times ``--jobs``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import load_avg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import kinetic_core as kc  # noqa: E402
import kinetic_core.backends.slurm.cli as slurm_cli  # noqa: E402
from kinetic_core.backends import get_backend  # noqa: E402
from kinetic_core.control.polling import wait_states  # noqa: E402
from kinetic_core.errors import KineticError  # noqa: E402
from tests.slurm.cluster import SlurmCluster, running_cluster  # noqa: E402

STARTED = frozenset({"RUNNING", "COMPLETING", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"})
ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"})


def noop() -> None:
    return None


# ---- (a) submit -> running, submit -> result -----------------------------------------------


def observe(
    look: Callable[[], tuple[bool, bool]], tick: float, timeout: float
) -> tuple[float, float]:
    """Seconds from now to the first observation of the job started, and of it ended."""
    t0 = time.perf_counter()
    started = ended = 0.0
    while not ended:
        is_started, is_ended = look()
        now = time.perf_counter() - t0
        if is_started and not started:
            started = now
        if is_ended:
            ended = now
            started = started or now
        elif now > timeout:
            raise SystemExit(f"a job did not end within {timeout:g}s")
        else:
            time.sleep(tick)
    return started, ended


def kinetic_once(target: kc.Target, tick: float) -> tuple[float, float, float]:
    t0 = time.perf_counter()
    handle = kc.submit(noop, target=target)
    submitted = time.perf_counter() - t0

    def look() -> tuple[bool, bool]:
        state = handle.state()
        return state.status != kc.JobStatus.PENDING, state.terminal

    started, ended = observe(look, tick, timeout=120)
    t1 = time.perf_counter()
    handle.result(timeout=60, cleanup=False)
    got = time.perf_counter() - t1
    t2 = time.perf_counter()
    handle.cleanup()  # what result() runs by default before it returns
    cleaned = time.perf_counter() - t2
    return submitted + started, submitted + ended + got, cleaned


def bare_once(cluster: SlurmCluster, tick: float, folder: Path) -> tuple[float, float]:
    t0 = time.perf_counter()
    out = cluster.run(
        "sbatch",
        "--parsable",
        f"--output={folder}/bare-%j.log",
        "--wrap",
        f"{sys.executable} -c pass",
    )
    slurm_id = out.strip().split(";")[0]
    submitted = time.perf_counter() - t0

    def look() -> tuple[bool, bool]:
        state = cluster.run("squeue", "-h", "-j", slurm_id, "-t", "all", "-o", "%T").strip()
        return state in STARTED, state in ENDED

    started, ended = observe(look, tick, timeout=120)
    return submitted + started, submitted + ended


def bench_roundtrip(cluster: SlurmCluster, store: str, args: argparse.Namespace) -> dict[str, Any]:
    target = kc.Target(backend="slurm", storage=store, poll_interval=args.tick)
    folder = Path(tempfile.mkdtemp(prefix="kinetic-bench-slurm-bare-"))
    runs: dict[str, list[tuple[float, ...]]] = {"kinetic": [], "bare": []}
    variants: dict[str, Callable[[], tuple[float, ...]]] = {
        "kinetic": lambda: kinetic_once(target, args.tick),
        "bare": lambda: bare_once(cluster, args.tick, folder),
    }
    for run in variants.values():  # warm: imports, the controller's first schedule
        run()
    for rep in range(args.repeats):
        order = list(variants) if rep % 2 == 0 else list(reversed(variants))
        for name in order:
            # Slurm schedules on its own cadence, and a job's end starts a pass: each submit
            # comes after a pause, so neither variant rides the other's scheduling pass.
            time.sleep(args.settle)
            runs[name].append(variants[name]())
    shutil.rmtree(folder, ignore_errors=True)
    return {
        name: tuple(statistics.median(r[i] for r in rs) for i in range(len(rs[0])))
        for name, rs in runs.items()
    }


# ---- (b) polls per interval for 1,000 waiting jobs -----------------------------------------


class CliCounter:
    """Wraps ``slurm_cli.run`` (the backend's only way to Slurm): when, which command; and
    the backend instance's ``poll``: when, how many jobs."""

    def __init__(self, backend: Any) -> None:
        self.calls: list[tuple[float, str]] = []
        self.polls: list[tuple[float, int, float]] = []  # (start, jobs, seconds)
        self.backend = backend
        self._original = slurm_cli.run
        self._lock = threading.Lock()

    def __enter__(self) -> CliCounter:
        original, poll = self._original, self.backend.poll

        def run(argv: list[str], **kw: Any) -> str:
            with self._lock:
                self.calls.append((time.perf_counter(), _label(argv)))
            return original(argv, **kw)

        def counted_poll(job_ids: list[str]) -> Any:
            began = time.perf_counter()
            try:
                return poll(job_ids)
            finally:
                self.polls.append((began, len(job_ids), time.perf_counter() - began))

        slurm_cli.run = run
        self.backend.poll = counted_poll
        return self

    def __exit__(self, *exc: object) -> None:
        slurm_cli.run = self._original
        del self.backend.poll

    def between(
        self, t0: float, t1: float
    ) -> tuple[collections.Counter[str], list[tuple[int, float]]]:
        """The commands run between ``t0`` and ``t1``, and each poll's jobs and seconds."""
        commands = collections.Counter(name for when, name in self.calls if t0 <= when < t1)
        return commands, [(n, took) for when, n, took in self.polls if t0 <= when < t1]


def _label(argv: list[str]) -> str:
    if argv[0] == "squeue":
        return "squeue --json" if "--json" in argv else "squeue (other)"
    return argv[0]


def submit_held(target: kc.Target, count: int) -> list[Any]:
    began = time.perf_counter()
    handles = [kc.submit(noop, target=target) for _ in range(count)]
    print(f"submitted {count} kinetic jobs held by --begin in {time.perf_counter() - began:.1f}s")
    return handles


async def shared_waiters(handles: list[Any], args: argparse.Namespace) -> tuple[float, float]:
    tasks = [asyncio.create_task(h.await_()) for h in handles]
    await asyncio.sleep(args.warmup)
    t0 = time.perf_counter()
    await asyncio.sleep(args.measure)
    t1 = time.perf_counter()
    early = sum(t.done() for t in tasks)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    if early:
        print(f"WARNING: {early} waiters ended early (a job left pending)", file=sys.stderr)
    return t0, t1


def sync_waiter(handles: list[Any], args: argparse.Namespace) -> tuple[float, float]:
    """One ``wait_states`` over every ref in a thread, measured after the warm-up."""

    def wait() -> None:
        with contextlib.suppress(KineticError):  # its timeout ends it
            wait_states(handles, timeout=args.warmup + args.measure + 2 * args.interval)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    time.sleep(args.warmup)
    t0 = time.perf_counter()
    time.sleep(args.measure)
    t1 = time.perf_counter()
    thread.join()
    return t0, t1


def per_job_cost(cluster: SlurmCluster, handles: list[Any], samples: int = 20) -> float:
    """Median seconds of one ``squeue -j`` for one job (what a per-job poll would run)."""
    ids = [
        cluster.run("squeue", "-h", f"--name=kinetic-{h.job_id}", "-o", "%i").strip()
        for h in handles[:samples]
    ]
    times = []
    for slurm_id in ids:
        t0 = time.perf_counter()
        cluster.run("squeue", "-h", "-j", slurm_id, "-o", "%T")
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def json_poll_cost(cluster: SlurmCluster, samples: int = 5) -> float:
    times = []
    for _ in range(samples):
        t0 = time.perf_counter()
        cluster.run("squeue", "--json")
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_polls(cluster: SlurmCluster, store: str, args: argparse.Namespace) -> dict[str, Any]:
    target = kc.Target(
        backend="slurm",
        storage=store,
        poll_interval=args.interval,
        sbatch_args=["--begin=now+3600"],
    )
    handles = submit_held(target, args.jobs)
    pending = cluster.run("squeue", "-h", "-t", "PD", "-o", "%r")
    reasons = collections.Counter(pending.split())
    print(f"Slurm holds {sum(reasons.values())} pending jobs, reasons {dict(reasons)}")
    rows: dict[str, Any] = {}
    with CliCounter(get_backend(target.resolve())) as counter:
        t0, t1 = asyncio.run(shared_waiters(handles, args))
        rows["shared poller (await_)"] = (*counter.between(t0, t1), (t1 - t0) / args.interval)
        t0, t1 = sync_waiter(handles, args)
        rows["one sync wait (wait_states)"] = (*counter.between(t0, t1), (t1 - t0) / args.interval)
    rows["per_job_s"] = per_job_cost(cluster, handles)
    rows["json_s"] = json_poll_cost(cluster)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--tick", type=float, default=0.05, help="observation cadence (a)")
    parser.add_argument("--settle", type=float, default=3.0, help="pause before each submit (a)")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=1.0, help="poll_interval (b)")
    parser.add_argument(
        "--warmup",
        type=float,
        default=20.0,
        help="seconds before measuring (b): a wait's first ticks come fast (5 ms, growing "
        "1.3x) before they settle at poll_interval; with 1,000 jobs a poll takes ~0.5 s",
    )
    parser.add_argument("--measure", type=float, default=30.0)
    parser.add_argument("--only", choices=("roundtrip", "polls"))
    args = parser.parse_args()
    print(f"load average before: {load_avg()}  (cores: {os.cpu_count()})")
    tmp = Path(tempfile.mkdtemp(prefix="kinetic-bench-slurm-"))
    store = f"file://{tmp}/kinetic"
    try:
        with running_cluster() as cluster:
            os.environ.update(cluster.env)
            os.environ["KINETIC_STORAGE"] = store
            print(f"private Slurm cluster up ({cluster.root}); load average {load_avg()}")
            if args.only != "polls":
                report_roundtrip(bench_roundtrip(cluster, store, args), args)
            if args.only != "roundtrip":
                report_polls(bench_polls(cluster, store, args), args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nload average after: {load_avg()}")
    return 0


def report_roundtrip(med: dict[str, tuple[float, ...]], args: argparse.Namespace) -> None:
    (k_run, k_res, k_clean), (b_run, b_res) = med["kinetic"], med["bare"]
    print(
        f"\n(a) no-op job, median of {args.repeats} (order rotating, {args.settle:g}s pause "
        f"before each submit), observed every {args.tick * 1000:.0f} ms:"
    )
    print(f"{'figure':34} {'kinetic':>10} {'bare sbatch':>12} {'ratio':>7}")
    rows = (
        ("submit -> running", k_run, b_run),
        ("submit -> result", k_res, b_res),
        ("submit -> result() (with cleanup)", k_res + k_clean, b_res),
    )
    for name, kinetic, bare in rows:
        print(f"{name:34} {kinetic * 1000:8.0f}ms {bare * 1000:10.0f}ms {kinetic / bare:6.2f}x")
    print(f"(cleanup, which result() runs before it returns: {k_clean * 1000:.0f} ms)")


def report_polls(rows: dict[str, Any], args: argparse.Namespace) -> None:
    print(
        f"\n(b) {args.jobs} pending jobs, poll_interval {args.interval:g}s, "
        f"{args.measure:g}s measured after {args.warmup:g}s:"
    )
    ok = True
    for name in ("shared poller (await_)", "one sync wait (wait_states)"):
        counts, polls, intervals = rows[name]
        per = {cmd: n / intervals for cmd, n in sorted(counts.items())}
        squeue = counts.get("squeue --json", 0)
        others = sum(n for cmd, n in counts.items() if cmd != "squeue --json")
        sizes = [n for n, _ in polls]
        # At most one squeue per interval (fewer when a poll outlasts the interval: the
        # cadence counts from a poll's start), one per backend poll, each poll of every job.
        ok = (
            ok
            and bool(sizes)
            and squeue / intervals <= 1 + 1.5 / intervals
            and squeue <= len(sizes) + 1
            and others == 0
            and min(sizes) == args.jobs
        )
        shown = ", ".join(f"{cmd} {v:.2f}" for cmd, v in per.items()) or "none"
        jobs = f"{min(sizes)}-{max(sizes)}" if sizes else "-"
        took = statistics.median(t for _, t in polls) if polls else 0.0
        print(
            f"  {name:30} per interval: {shown}; {len(sizes)} backend polls of {jobs} jobs "
            f"(median {took * 1000:.0f} ms each), {squeue / max(len(sizes), 1):.2f} squeue each"
        )
    per_job, json_s = rows["per_job_s"], rows["json_s"]
    print(
        f"  one squeue --json over all jobs: {json_s * 1000:.0f} ms; baseline one squeue -j per "
        f"job: {per_job * 1000:.1f} ms x {args.jobs} = {per_job * args.jobs:.1f} s per interval "
        f"({args.jobs}x the commands, {per_job * args.jobs / json_s:.0f}x the time)"
    )
    print(f"goal one squeue per interval, nothing per job: {'met' if ok else 'NOT met'}")
    print(
        "(before the warm-up ends a wait's first ticks come faster, 5 ms growing 1.3x, by "
        "design: each of them is still one squeue for every job)"
    )


if __name__ == "__main__":
    sys.exit(main())
