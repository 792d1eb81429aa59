"""A CPU-bound job with and without the runner's sidecar (signal watcher + telemetry).

Both variants run in this one process, interleaved (alternating which goes first),
``--repeats`` times; medians (and
bests) are reported. The job is a fixed amount of pure-Python arithmetic (``--seconds``
long without the sidecar). With the sidecar, the real ``kinetic_core.runtime.sidecar.Sidecar``
thread runs beside it against a file:// storage root, as in a job: one list of
``jobs/{id}/signals`` per tick and a telemetry sample (``/proc`` of this process tree,
NVML where present) written every sample interval. ``--tick``/``--sample`` set the two
intervals (defaults: the runner's, 2 s and 5 s); ``--stress`` uses 0.05 s and 0.1 s.
Also prints what one watcher tick and one sample cost on their own.

Goal: with / without <= 1.02 at the default intervals (no measurable slowdown).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kinetic_core.runtime import sidecar, signals, telemetry
from kinetic_core.storage.local import LocalStorage

JOB_ID = "bench-telemetry"


def job(units: int) -> float:
    """Fixed work: ``units`` x 100k multiply-adds in the interpreter."""
    acc = 0.0
    for _ in range(units):
        for k in range(100_000):
            acc += k * 0.5
    return acc


def calibrate(seconds: float) -> int:
    start = time.perf_counter()
    job(5)
    per_unit = (time.perf_counter() - start) / 5
    return max(1, round(seconds / per_unit))


def timed(units: int, storage: LocalStorage | None) -> tuple[float, float]:
    """Wall seconds of the job, and CPU seconds of this whole process meanwhile (job and
    sidecar threads): the CPU figure barely moves with other load on the machine."""
    if storage is not None:
        sidecar.start(storage, JOB_ID, 0, None)
    start, cpu = time.perf_counter(), time.process_time()
    job(units)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    if storage is not None:
        sidecar.stop()
    return elapsed, cpu


def unit_costs(storage: LocalStorage, n: int = 200) -> tuple[float, float]:
    """Seconds per watcher tick (one list) and per telemetry sample (read + write)."""
    watcher = signals.Watcher(storage, JOB_ID, 0, None)
    sampler = telemetry.Sampler(storage, JOB_ID, 0, None)
    start = time.perf_counter()
    for _ in range(n):
        watcher.tick()
    tick = (time.perf_counter() - start) / n
    start = time.perf_counter()
    for _ in range(n):
        sampler.write()
    return tick, (time.perf_counter() - start) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tick", type=float, default=signals.POLL_SECONDS)
    parser.add_argument("--sample", type=float, default=telemetry.SAMPLE_SECONDS)
    parser.add_argument("--stress", action="store_true", help="tick 0.05 s, sample 0.1 s")
    args = parser.parse_args()
    tick, sample = (0.05, 0.1) if args.stress else (args.tick, args.sample)
    os.environ[signals.POLL_ENV], os.environ[telemetry.SAMPLE_ENV] = str(tick), str(sample)
    print(f"load average before: {os.getloadavg()[0]:.2f}; tick {tick:g} s, sample {sample:g} s")
    with tempfile.TemporaryDirectory() as tmp:
        storage = LocalStorage(f"file://{tmp}")
        units = calibrate(args.seconds)
        runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        for i in range(args.repeats):  # alternate who goes first: order alone moved CPU ~10%
            for with_sidecar in (i % 2 == 0, i % 2 == 1):
                runs[with_sidecar].append(timed(units, storage if with_sidecar else None))
        per_tick, per_sample = unit_costs(storage)
    without, with_ = [w for w, _ in runs[False]], [w for w, _ in runs[True]]
    med_without, med_with = statistics.median(without), statistics.median(with_)
    cpu_without = statistics.median(c for _, c in runs[False])
    cpu_with = statistics.median(c for _, c in runs[True])
    print(f"without sidecar: median {med_without:.3f} s (best {min(without):.3f} s)")
    print(f"with sidecar:    median {med_with:.3f} s (best {min(with_):.3f} s)")
    ratio = med_with / med_without
    print(f"with / without: {ratio:.3f} (best/best {min(with_) / min(without):.3f})")
    print(
        f"process CPU: without {cpu_without:.3f} s, with {cpu_with:.3f} s: "
        f"ratio {cpu_with / cpu_without:.4f}"
    )
    print(f"one watcher tick {per_tick * 1e3:.3f} ms; one sample written {per_sample * 1e3:.3f} ms")
    share = per_tick / tick + per_sample / sample  # the sidecar's busy time per second
    print(f"sidecar busy {share * 100:.3f}% of the time: the most it can take from the job")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(f"goal with/without <= 1.02: {'met' if ratio <= 1.02 else 'NOT met'}")


if __name__ == "__main__":
    main()
