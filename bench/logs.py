"""A job printing ~10 MB/s, with and without its log tee'd into storage (file://).

All variants run in this one process, interleaved, ``--repeats`` times; medians are
reported. fd 1 is a pipe drained by a ``cat > /dev/null`` child, as a container's stdout
is drained by its runtime. The job is a fixed amount of work (format a line, a little
arithmetic, ``print``), calibrated so that without the tee it prints about ``--rate``
MB/s; each variant times the same work:

- none (baseline): fd 1 and 2 straight to the pipe.
- process (what the runner does, ``kinetic_core/runtime/log_capture.py``): fds 1 and 2 into a
  pipe read by a small pump process, which copies to the pipe and writes 4 MiB chunks to
  storage every few seconds.
- thread (the alternative, kept here only to measure it): the same pump as a thread
  inside the job's process, competing for its GIL.

Goal: process / none <= 1.05 (no measurable slowdown). ``--rate 0`` prints as fast as the
job can (about 20 MB/s here): the stress case, where a pump thread's GIL contention shows.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kinetic_core.records.log_chunks import ChunkWriter
from kinetic_core.runtime import log_capture
from kinetic_core.storage.local import LocalStorage

MB = 1 << 20
LINE = "step {:>9} loss {:.6f} lr {:.2e} " + "x" * 50 + "\n"  # ~100 bytes


def job(lines: int, work: int) -> None:
    """The job: ``lines`` formatted lines, ``work`` units of arithmetic before each."""
    write = sys.stdout.write
    acc = 0.0
    for i in range(lines):
        for k in range(work):
            acc += k * 0.5
        write(LINE.format(i, acc % 1, 1e-3))
    sys.stdout.flush()


@contextlib.contextmanager
def no_tee(storage: LocalStorage, job_id: str) -> Iterator[None]:
    yield


@contextlib.contextmanager
def process_tee(storage: LocalStorage, job_id: str) -> Iterator[None]:
    capture = log_capture.LogCapture(storage, job_id)
    capture.start()
    try:
        yield
    finally:
        capture.stop()


@contextlib.contextmanager
def thread_tee(storage: LocalStorage, job_id: str) -> Iterator[None]:
    """The pump as threads in this process (the design not taken)."""
    writer = ChunkWriter(storage, job_id)
    writer.begin()
    out = os.dup(1)
    saved = (os.dup(1), os.dup(2))
    read_end, write_end = os.pipe()
    with contextlib.suppress(OSError):
        import fcntl

        fcntl.fcntl(write_end, 1031, 1 << 20)
    sys.stdout.flush()
    os.dup2(write_end, 1)
    os.dup2(write_end, 2)
    os.close(write_end)
    stop = threading.Event()

    def pump() -> None:
        while data := os.read(read_end, 1 << 16):
            view = memoryview(data)
            while view:
                view = view[os.write(out, view) :]
            writer.feed(data)
        os.close(read_end)

    def upload() -> None:
        while not stop.wait(log_capture.FLUSH_SECONDS):
            writer.flush()
        writer.end()

    threads = [threading.Thread(target=pump), threading.Thread(target=upload)]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        sys.stdout.flush()
        for fd, original in zip((1, 2), saved, strict=True):
            os.dup2(original, fd)
            os.close(original)
        threads[0].join()
        stop.set()
        threads[1].join()
        os.close(out)


VARIANTS: dict[str, Callable[[LocalStorage, str], contextlib.AbstractContextManager[None]]] = {
    "none": no_tee,
    "process": process_tee,
    "thread": thread_tee,
}


def timed(variant: str, storage: LocalStorage, lines: int, work: int, n: int) -> float:
    with VARIANTS[variant](storage, f"bench-{variant}-{n}"):
        start = time.perf_counter()
        job(lines, work)
        return time.perf_counter() - start


def calibrate(rate: float, seconds: float, storage: LocalStorage) -> tuple[int, int]:
    """(lines, work) such that the job prints ``rate`` MB/s for ``seconds`` without a tee:
    time per line = a + b * work, measured at two amounts of work (medians of 3)."""
    probe, high = 50_000, 200
    bytes_per_line = len(LINE.format(0, 0.5, 1e-3))
    if rate <= 0:  # as fast as it can: where the GIL contention of a thread shows
        return int(20 * MB * seconds / bytes_per_line), 0

    def per_line(work: int) -> float:
        return statistics.median(timed("none", storage, probe, work, -1) for _ in range(3)) / probe

    a, b = per_line(0), (per_line(high) - per_line(0)) / high
    target = bytes_per_line / (rate * MB)
    work = max(0, round((target - a) / b)) if b > 0 else 0
    return max(1, int(rate * MB * seconds / bytes_per_line)), work


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rate", type=float, default=10.0, help="MB/s without the tee (0: as fast as it can)"
    )
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    report = os.fdopen(os.dup(1), "w", buffering=1)
    drain = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert drain.stdin is not None
    with contextlib.suppress(OSError):  # the same 1 MiB buffer the tee's own pipe has
        import fcntl

        fcntl.fcntl(drain.stdin.fileno(), 1031, 1 << 20)
    sys.stdout.flush()
    saved = (os.dup(1), os.dup(2))
    os.dup2(drain.stdin.fileno(), 1)  # the "container runtime" reading the job's stdout
    os.dup2(drain.stdin.fileno(), 2)
    with tempfile.TemporaryDirectory(prefix="kinetic-bench-logs-") as root:
        storage = LocalStorage(f"file://{root}")
        lines, work = calibrate(args.rate, args.seconds, storage)
        report.write(
            f"load average {os.getloadavg()[0]:.2f}; job: {lines} lines of ~100 B, "
            f"work {work}/line\n"
        )
        times: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for n in range(args.repeats):
            for name in VARIANTS:
                times[name].append(timed(name, storage, lines, work, n))
            row = ", ".join(f"{k} {v[-1]:.3f} s" for k, v in times.items())
            report.write(f"round {n}: {row}\n")
        size = lines * len(LINE.format(0, 0.5, 1e-3)) / MB
        base, best = statistics.median(times["none"]), min(times["none"])
        report.write(f"\n{size:.1f} MB printed per run; median (and best) of {args.repeats}:\n")
        for name, values in times.items():
            took, fastest = statistics.median(values), min(values)
            report.write(
                f"  {name:8} {took:.3f} s  {size / took:5.1f} MB/s  ratio {took / base:.3f}"
                f"  (best {fastest:.3f} s, ratio {fastest / best:.3f})\n"
            )
        ratio = statistics.median(times["process"]) / base
        met = "met" if ratio <= 1.05 else "NOT met"
        report.write(f"goal process/none <= 1.05 (medians): {met}\n")
    for fd, original in zip((1, 2), saved, strict=True):
        os.dup2(original, fd)
    drain.stdin.close()
    drain.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
