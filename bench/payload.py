"""A 1 GiB argument and a 1 GiB result through file:// storage, vs plain file I/O.

Each variant runs in a fresh subprocess (so peak RSS figures do not mix), interleaved,
``--repeats`` times; medians are reported:

- kinetic:   ``h = submit(identity, (data,))``; the caller drops ``data``; ``h.result()``.
             1 GiB travels to the job and 1 GiB comes back. Envelope format 3 (BLAKE3
             chunk digests) where ``blake3`` is installed (the ``fast`` extra).
- kinetic-zygote: the same with the local backend's default launch (a supervisor forked
             from its zygote: no interpreter start, the job's imports preloaded), which
             "kinetic" turns off to read the job's peak memory (see below).
- kinetic-format2: the same with ``blake3`` made unimportable in the submitter and the
             job (``KINETIC_BENCH_NO_BLAKE3``): format 2, sha256 chunk digests, as before.
- copyfile (baseline): ``shutil.copyfile`` of a file of the same size, once per direction
             (one copy each, in the kernel): source -> arg.bin -> result.bin, both kept
             until the end, as kinetic keeps both envelopes (copying back onto the source
             would reuse its freshly freed page cache, which no transport keeping its files
             gets).
- floor:     the least any file transport does, per direction: write the bytes once into
             a new file (256 KiB writes, the fast kind here) and read them once into a new
             object (``pickle.load`` reading straight into it on two threads); both files
             are kept until the end, as kinetic keeps both envelopes. Kinetic does the same
             passes, and hashes what it writes and verifies what it reads
             (``kinetic_core/records/chunks.py``). Until issue 37 this variant was
             "write+read": one ``write()`` and a read on one thread, both slower here.

Throughput = 2 x payload / wall time. Goals: kinetic >= 0.8x the floor variant's pace
(floor seconds over kinetic's, side by side in the same run; copyfile beside it); peak
RSS of the submitting process <= 1.5x the payload. The job's peak RSS is read from
``RUSAGE_CHILDREN`` after reaping its supervisor (Linux keeps the largest descendant's peak).
The kinetic child makes one empty round trip before it times the payload's: the modules
a first ``submit`` and ``result()`` import are its start-up, not the transport. Its
breakdown splits the job's side by when the job's function was called (it notes the time),
the result envelope's last write (its mtime) and the ``outcome.json`` and ``finished.json``
records.

Fair turns: the variants' order rotates from one repeat to the next (and reverses every
other repeat), and each child starts ``--settle`` seconds after the previous one ended.
On a VM with free page reporting (virtio-balloon), memory freed a moment ago is still
backed by the host and cheap to reuse, while memory freed seconds ago must be backed
again: one 1 GiB write() into a new file took 0.72 s right after a free and 2.23 s 8 s
after one on the 2-core machine (its page cache comes in 2 MiB folios; in 256 KiB
writes it took 0.41-0.44 s either way). Without the pause a variant was faster or slower
by what its predecessor had just freed. The unit costs are measured the same way, each
pass into new memory (a new file, a new object) after the same pause.

The unit-cost floor printed at the end is the same least work from those unit costs, each
pass alone: per direction one write pass into a new file (the faster of one write and
256 KiB writes) and one read into a new object (the fastest of a read, ``pickle.load``
and ``pickle.load`` on two threads; a file mapped into memory instead of read is not a
transport here: it can change after any check). It is lower than the floor variant
whenever dirty pages pile up: the variants keep 2x the payload of new files, the unit
passes 1x at a time.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import pickle
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import load_avg, med

MB = 1 << 20
#: Seconds between two children (see the docstring: "Fair turns").
SETTLE = 5.0
#: Goal: kinetic's round trip at least this fraction of the pace of two floors (issue 37).
FLOOR_GOAL = 0.8


def identity(b: bytes) -> bytes:
    return b


def identity_marked(b: bytes, mark: str) -> bytes:
    """``identity``, noting when the job's function is called: the end of the job's
    verify+load of its argument, the start of its run (``parts`` in ``child_kinetic``)."""
    with open(mark, "w") as fh:
        fh.write(repr(time.time()))
    return b


def make_payload(size: int) -> bytes:
    return b"x" * size  # touched pages (bytes(n) would map the shared zero page)


def peak_mb(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # Linux: KiB


# ---- children (one variant per fresh process) ------------------------------------------------


def become_subreaper() -> None:
    """Adopt this process's orphaned descendants (Linux ``PR_SET_CHILD_SUBREAPER``): the
    job's supervisor detaches with a double fork, and only its parent can reap it."""
    import ctypes

    if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def wait_json(path: Path, timeout: float = 30.0) -> dict[str, Any]:
    """A record another process writes a little later: a job reads terminal once its
    outcome is decided, before its supervisor writes ``exit.json``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            record: dict[str, Any] = json.loads(path.read_text())
            return record
        except (FileNotFoundError, ValueError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def child_kinetic(
    size: int, workdir: Path, ndarray: bool = False, format2: bool = False, zygote: bool = False
) -> dict[str, Any]:
    if format2:  # blake3 not importable here nor in the job (sitecustomize below)
        hide = workdir / "no-blake3"
        hide.mkdir()
        (hide / "sitecustomize.py").write_text("import sys\nsys.modules['blake3'] = None\n")
        os.environ["PYTHONPATH"] = os.pathsep.join([str(hide), os.environ.get("PYTHONPATH", "")])
        sys.modules["blake3"] = None  # type: ignore[assignment,unused-ignore]
    root = workdir / "kinetic"
    os.environ["KINETIC_STORAGE"] = f"file://{root}"
    # A fresh-interpreter supervisor descends from this process, so RUSAGE_CHILDREN can
    # report the job's peak memory; a zygote-forked one does not (the job's memory is the
    # same). It detaches (a double fork): as a subreaper this process still reaps it.
    # ``zygote``: the local backend's default launch, whose jobs skip the interpreter's
    # start and the imports after the start (the zygote preloaded them); no job peak then.
    os.environ["KINETIC_LOCAL_ZYGOTE"] = "1" if zygote else "0"
    if not zygote:
        become_subreaper()
    import kinetic_core as kc

    target = kc.Target(storage=f"file://{root}")
    # One empty round trip first: the modules a first submit and result() import (~0.2 s)
    # are a process's start-up, not the transport's; the job is a fresh interpreter anyway.
    kc.submit(identity, (b"",), target=target).result()
    base_rss = peak_mb(resource.RUSAGE_SELF)
    if ndarray:  # the usual ML value: pickled in-band, read straight into its new buffer
        import numpy as np

        data: Any = np.full(size, ord("x"), dtype=np.uint8)
    else:
        data = make_payload(size)
    mark = workdir / "called"
    t0 = time.time()
    handle = kc.submit(identity_marked, (data, str(mark)), target=target)
    t1 = time.time()
    del data
    handle.wait()
    t2 = time.time()
    out = handle.result(cleanup=False)
    t3 = time.time()
    assert len(out) == size and (not ndarray or out.flags.writeable)
    del out
    job = root / "jobs" / handle.job_id
    started = json.loads((job / "started.json").read_text())["at"]
    called = float(mark.read_text())
    stored = (job / "result.pkl").stat().st_mtime  # its last write (published by link)
    decided = json.loads((job / "outcome.json").read_text())["at"]
    finished = wait_json(job / "finished.json")["at"]
    local = root / "backend-local" / handle.job_id
    pid = json.loads((local / "launch.json").read_text())["pid"]
    exited = wait_json(local / "exit.json")["finished_at"]
    if not zygote:  # reap the supervisor: RUSAGE_CHILDREN then covers it and its runner
        os.waitpid(pid, 0)
    handle.cleanup()
    return {
        "seconds": t3 - t0,
        "self_peak_mb": peak_mb(resource.RUSAGE_SELF),
        "base_mb": base_rss,
        "job_peak_mb": None if zygote else peak_mb(resource.RUSAGE_CHILDREN),
        "parts": {
            "submit(): pickle+hash+write arg": t1 - t0,
            "job start (until started.json)": started - t1,
            "job: verify+load arg, run, pickle+hash+write result": finished - started,
            "  of which: verify+load arg (until the function is called)": called - started,
            "  of which: run, pickle+hash+write result": stored - called,
            "  of which: preview, outcome.json": decided - stored,
            "  of which: finished.json": finished - decided,
            "job end -> exit.json -> wait() returns": t2 - finished,
            "result(): verify+load result": t3 - t2,
        },
        "exit_to_detect": t2 - exited,
    }


class PieceWriter:
    """A file for ``pickle.dump`` that hands the file 256 KiB at a time (as kinetic)."""

    def __init__(self, fh: Any) -> None:
        self.fh = fh

    def write(self, data: Any) -> int:
        from kinetic_core.records.chunks import write_in_pieces

        return write_in_pieces(self.fh, data)


def child_floor(size: int, workdir: Path) -> dict[str, Any]:
    base_rss = peak_mb(resource.RUSAGE_SELF)
    data = make_payload(size)
    t0 = time.time()
    for name in ("arg.bin", "result.bin"):  # argument there, result back
        with open(workdir / name, "wb") as fh:
            pickle.dump(data, PieceWriter(fh), protocol=5)
        del data
        reader = TwoThreadFile(workdir / name)
        try:
            data = pickle.load(reader)  # type: ignore[arg-type]
        finally:
            reader.close()
    seconds = time.time() - t0  # both files kept until now, as kinetic keeps its envelopes
    assert len(data) == size
    return {"seconds": seconds, "self_peak_mb": peak_mb(resource.RUSAGE_SELF), "base_mb": base_rss}


def write_source(path: Path, size: int) -> None:
    with open(path, "wb") as fh:
        chunk = b"x" * (8 * MB)
        for offset in range(0, size, len(chunk)):
            fh.write(chunk[: size - offset])
        fh.flush()
        os.fsync(fh.fileno())


def child_copyfile(size: int, workdir: Path) -> dict[str, Any]:
    base_rss = peak_mb(resource.RUSAGE_SELF)
    src = workdir / "src.bin"
    write_source(src, size)  # then flushed: the copies' writeback is theirs alone
    t0 = time.time()
    shutil.copyfile(src, workdir / "arg.bin")  # argument there
    shutil.copyfile(workdir / "arg.bin", workdir / "result.bin")  # result back; both kept
    seconds = time.time() - t0
    return {"seconds": seconds, "self_peak_mb": peak_mb(resource.RUSAGE_SELF), "base_mb": base_rss}


class TwoThreadFile:
    """A file for ``pickle.load`` whose ``readinto`` (pickle's for large values, straight
    into the new object) reads on two threads with ``os.preadv``, as kinetic's reader
    does: the fastest plain read into a new object, for the floor."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self.pos = 0

    def read(self, n: int) -> bytes:
        data = os.pread(self.fd, n, self.pos)
        self.pos += len(data)
        return data

    def readline(self) -> bytes:  # pickle never needs it for protocol 5 bytes
        raise NotImplementedError

    def readinto(self, buf: Any) -> int:
        import threading

        view, step, base = memoryview(buf).cast("B"), 8 * MB, self.pos

        def part(first: int) -> None:
            for at in range(first * step, len(view), 2 * step):
                end = min(at + step, len(view))
                while at < end:
                    at += os.preadv(self.fd, [view[at:end]], base + at)

        threads = [threading.Thread(target=part, args=(k,)) for k in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.pos += len(view)
        return len(view)

    def close(self) -> None:
        os.close(self.fd)


def child_parts(size: int, workdir: Path, settle: float = SETTLE) -> dict[str, Any]:
    """Unit costs per pass over the payload, each into new memory (a new file, a new
    object) after the same pause as the variants, to explain where kinetic's time goes."""
    from kinetic_core.records.chunks import write_in_pieces

    data = make_payload(size)
    source = workdir / "source.pkl"
    with open(source, "wb") as fh:
        pickle.dump(data, fh, protocol=pickle.HIGHEST_PROTOCOL)
    out: dict[str, float] = {}
    kept: list[Any] = []

    def timed(name: str, fn: Any) -> None:
        kept.clear()  # what the previous pass made is freed, then the pause
        for path in workdir.glob("new-*"):
            path.unlink()
        time.sleep(settle)
        t0 = time.time()
        kept.append(fn())
        out[name] = time.time() - t0

    def write(path: Path, how: Any) -> None:
        with open(path, "wb") as fh:
            how(fh)

    def load_two_threads() -> Any:
        reader = TwoThreadFile(source)
        try:
            return pickle.load(reader)
        finally:
            reader.close()

    timed("sha256 pass", lambda: hashlib.sha256(data).hexdigest())
    if importlib.util.find_spec("blake3"):
        from blake3 import blake3

        timed("blake3 pass (one thread)", lambda: blake3(data).hexdigest())
    timed("write pass (into a new file)", lambda: write(workdir / "new-w", lambda f: f.write(data)))
    timed(
        "write pass in 256 KiB writes (into a new file)",  # chunks.WRITE_PIECE, as kinetic
        lambda: write(workdir / "new-w", lambda f: write_in_pieces(f, data)),
    )
    timed(
        "pickle.dump (into a new file)",
        lambda: write(workdir / "new-p", lambda f: pickle.dump(data, f, protocol=5)),
    )
    timed("copyfile (into a new file)", lambda: shutil.copyfile(source, workdir / "new-c"))
    timed("read pass (8 MiB chunks, page cache)", lambda: _read_through(source))
    timed("read into a new object (one thread)", lambda: source.read_bytes())
    timed("pickle.load (one thread)", lambda: _pickle_load(source))
    timed("pickle.load, readinto on two threads", load_two_threads)
    kept.clear()
    return {"seconds": 0.0, "parts": out}


def _pickle_load(path: Path) -> Any:
    with open(path, "rb") as fh:
        return pickle.load(fh)


def _read_through(path: Path) -> None:
    with open(path, "rb") as fh:
        while fh.read(8 * MB):
            pass


CHILDREN = {
    "kinetic": child_kinetic,
    "kinetic-zygote": lambda size, workdir: child_kinetic(size, workdir, zygote=True),
    "kinetic-format2": lambda size, workdir: child_kinetic(size, workdir, format2=True),
    "kinetic-ndarray": lambda size, workdir: child_kinetic(size, workdir, ndarray=True),
    "floor": child_floor,
    "copyfile": child_copyfile,
}


def run_child(variant: str, size: int, workdir: Path, settle: float = SETTLE) -> dict[str, Any]:
    """Run ``variant`` in a fresh process, ``settle`` seconds from now (see "Fair turns")."""
    time.sleep(settle)
    sub = workdir / variant
    sub.mkdir()
    try:
        proc = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                variant,
                "--size-mb",
                str(size // MB),
                "--workdir",
                str(sub),
                "--settle",
                str(settle),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise SystemExit(f"variant {variant} failed:\n{proc.stdout}\n{proc.stderr}")
        return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]
    finally:
        shutil.rmtree(sub, ignore_errors=True)


def turns(variants: list[str], turn: int) -> list[str]:
    """The variants' order in repeat ``turn``: rotated by one each repeat and reversed
    every other, so that no variant always runs first or after the same one."""
    k = turn % len(variants)
    order = variants[k:] + variants[:k]
    return order[::-1] if turn % 2 else order


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="payload size in MiB")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--settle",
        type=float,
        default=SETTLE,
        help="seconds between two runs (memory freed by one is not cheap for the next)",
    )
    parser.add_argument("--child", choices=sorted([*CHILDREN, "parts"]), help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    size = args.size_mb * MB
    if args.child == "parts":
        print(json.dumps(child_parts(size, Path(args.workdir), args.settle)))
        return 0
    if args.child:
        print(json.dumps(CHILDREN[args.child](size, Path(args.workdir))))
        return 0

    tmp = Path(tempfile.mkdtemp(prefix="kinetic-bench-payload-"))
    try:
        free = shutil.disk_usage(tmp).free
        if free < 4 * size + 1024 * MB:
            raise SystemExit(f"{tmp} has {free / MB:.0f} MiB free; need ~{4 * size / MB:.0f} MiB")
        return run(args, size, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(args: argparse.Namespace, size: int, tmp: Path) -> int:
    load = load_avg()
    print(
        f"payload {size / MB:.0f} MiB; load average {load} (cores: {os.cpu_count()}); "
        f"{args.settle:g} s between runs, order rotated"
    )
    if not importlib.util.find_spec("blake3"):
        print(
            "(blake3 is not installed: 'kinetic' writes format 2 as well; install the fast extra)"
        )
    variants = ["floor", "copyfile", "kinetic", "kinetic-zygote", "kinetic-format2"]
    if importlib.util.find_spec("numpy"):
        variants.append("kinetic-ndarray")  # the same through a NumPy array
    else:
        print("(numpy is not installed: the NumPy array variant is not run)")
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    for turn in range(args.repeats):
        for variant in turns(variants, turn):
            results[variant].append(run_child(variant, size, tmp, args.settle))
    part_runs = [run_child("parts", size, tmp, args.settle)["parts"] for _ in range(args.repeats)]
    parts = {key: med([run[key] for run in part_runs]) for key in part_runs[0]}

    moved = 2 * size / MB
    base = med([r["seconds"] for r in results["floor"]])
    copy = med([r["seconds"] for r in results["copyfile"]])
    print(f"\n{moved:.0f} MiB moved per run (argument + result), median of {args.repeats}")
    print(
        f"{'variant':<16}{'wall s':>9}{'MiB/s':>9}{'vs copyfile':>13}{'vs floor':>15}"
        f"{'peak RSS MiB':>14}{'x payload':>11}{'job peak MiB':>14}"
    )
    for variant, runs in results.items():
        secs = med([r["seconds"] for r in runs])
        peak = med([r["self_peak_mb"] for r in runs])
        job = med([r["job_peak_mb"] for r in runs]) if runs[0].get("job_peak_mb") else None
        job_txt = f"{job:>14.0f}" if job is not None else f"{'-':>14}"
        print(
            f"{variant:<16}{secs:>9.2f}{moved / secs:>9.0f}{copy / secs:>12.2f}x{base / secs:>14.2f}x"
            f"{peak:>14.0f}{peak / (size / MB):>10.2f}x{job_txt}"
        )
    kin = results["kinetic"]
    print(
        f"(interpreter baseline RSS before the payload: {med([r['base_mb'] for r in kin]):.0f} "
        "MiB in the kinetic child)"
    )

    old, zyg = results["kinetic-format2"], results["kinetic-zygote"]
    print(f"\nwhere the time goes (median){'kinetic':>39}{'zygote':>9}{'format2':>10}")
    for key in kin[0]["parts"]:
        now, warm, before = (med([r["parts"][key] for r in rs]) for rs in (kin, zyg, old))
        print(f"  {key:<58}{now:7.2f} s{warm:7.2f} s{before:7.2f} s")
    detect = [med([r["exit_to_detect"] for r in rs]) for rs in (kin, zyg, old)]
    print(
        f"  {'  of which: supervisor exit -> wait() notices':<58}"
        + "".join(f"{d:7.2f} s" for d in detect)
    )
    print(f"unit costs per pass over the payload (median of {args.repeats})")
    for key, value in parts.items():
        print(f"  {key:<58}{value:7.2f} s")
    write = min(v for k, v in parts.items() if k.startswith("write pass"))
    read = min(v for k, v in parts.items() if k.startswith(("read into", "pickle.load")))
    units, one_copy = write + read, parts["copyfile (into a new file)"]
    kin_s = med([r["seconds"] for r in kin])
    print(
        f"the floor from those unit costs, per direction (the faster write pass + the fastest "
        f"read into a new object): {write:.2f} + {read:.2f} = {units:.2f} s = "
        f"{one_copy / units:.2f}x copyfile into a new file ({one_copy:.2f} s)"
    )

    peak = med([r["self_peak_mb"] for r in kin])
    print("\nGoals")
    ok1 = base / kin_s >= FLOOR_GOAL
    ok2 = peak <= 1.5 * size / MB
    print(
        f"  throughput >= {FLOOR_GOAL}x the floor:     {base / kin_s:.2f}x   "
        f"{'MET' if ok1 else 'MISSED'}   (kinetic {kin_s:.2f} s, floor {base:.2f} s side by "
        f"side; format 2: {base / med([r['seconds'] for r in old]):.2f}x)"
    )
    zyg_s = med([r["seconds"] for r in zyg])
    print(
        f"  the same, the default launch (zygote): {base / zyg_s:.2f}x   "
        f"{'MET' if base / zyg_s >= FLOOR_GOAL else 'MISSED'}   (kinetic-zygote {zyg_s:.2f} s: "
        "no interpreter start, the job's imports preloaded)"
    )
    by_units = 2 * units / kin_s
    print(
        f"  against the unit-cost floor:         {by_units:.2f}x   "
        f"{'MET' if by_units >= FLOOR_GOAL else 'MISSED'}   (two floors from the unit costs "
        f"{2 * units:.2f} s: each pass alone, its predecessor's files deleted)"
    )
    print(
        f"  beside them: {copy / kin_s:.2f}x copyfile ({copy:.2f} s; the floor is "
        f"{copy / base:.2f}x copyfile)"
    )
    print(
        f"  submitter peak RSS <= 1.5x payload:  {peak / (size / MB):.2f}x   "
        f"{'MET' if ok2 else 'MISSED'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
