"""A 1 GiB argument and a 1 GiB result through file:// storage, vs plain file I/O.

Each variant runs in a fresh subprocess (so peak RSS figures do not mix), interleaved,
``--repeats`` times; medians are reported:

- kinetic:   ``h = submit(identity, (data,))``; the caller drops ``data``; ``h.result()``.
             1 GiB travels to the job and 1 GiB comes back. Envelope format 3 (BLAKE3
             chunk digests) where ``blake3`` is installed (the ``fast`` extra).
- kinetic-format2: the same with ``blake3`` made unimportable in the submitter and the
             job (``KINETIC_BENCH_NO_BLAKE3``): format 2, sha256 chunk digests, as before.
- copyfile (baseline): ``shutil.copyfile`` of a file of the same size, once per direction
             (one copy each, in the kernel).
- write+read: write the bytes to a file and read them back, once per direction, on one
             thread (what a hand-rolled file transport does: 2 writes, 2 reads; both files
             are kept until the end, as kinetic keeps both envelopes). Kinetic does the same
             passes but reads and verifies on all cores (``kinetic_core/chunks.py``).

Throughput = 2 x payload / wall time. Goals: kinetic >= 0.7x copyfile (a plain file copy);
peak RSS of the submitting process <= 1.5x the payload. The job's peak RSS is read from
``RUSAGE_CHILDREN`` after reaping its supervisor (Linux keeps the largest descendant's peak).
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
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MB = 1 << 20


def identity(b: bytes) -> bytes:
    return b


def make_payload(size: int) -> bytes:
    return b"x" * size  # touched pages (bytes(n) would map the shared zero page)


def peak_mb(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024  # Linux: KiB


# ---- children (one variant per fresh process) ------------------------------------------------


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
    size: int, workdir: Path, ndarray: bool = False, format2: bool = False
) -> dict[str, Any]:
    if format2:  # blake3 not importable here nor in the job (sitecustomize below)
        hide = workdir / "no-blake3"
        hide.mkdir()
        (hide / "sitecustomize.py").write_text("import sys\nsys.modules['blake3'] = None\n")
        os.environ["PYTHONPATH"] = os.pathsep.join([str(hide), os.environ.get("PYTHONPATH", "")])
        sys.modules["blake3"] = None  # type: ignore[assignment,unused-ignore]
    root = workdir / "kinetic"
    os.environ["KINETIC_STORAGE"] = f"file://{root}"
    # A fresh-interpreter supervisor is this process's child, so RUSAGE_CHILDREN can report
    # the job's peak memory; a zygote-forked one is not (the job's memory is the same).
    os.environ["KINETIC_LOCAL_ZYGOTE"] = "0"
    import kinetic_core as kc

    target = kc.Target(storage=f"file://{root}")
    base_rss = peak_mb(resource.RUSAGE_SELF)
    if ndarray:  # the usual ML value: pickled in-band, read straight into its new buffer
        import numpy as np

        data: Any = np.full(size, ord("x"), dtype=np.uint8)
    else:
        data = make_payload(size)
    t0 = time.time()
    handle = kc.submit(identity, (data,), target=target)
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
    finished = wait_json(job / "finished.json")["at"]
    local = root / "backend-local" / handle.job_id
    pid = json.loads((local / "launch.json").read_text())["pid"]
    exited = wait_json(local / "exit.json")["finished_at"]
    try:
        os.waitpid(pid, 0)  # reap the supervisor: RUSAGE_CHILDREN then covers it and its runner
    except ChildProcessError:
        pass  # a detached supervisor is not our child: the job's peak is not measured
    handle.cleanup()
    return {
        "seconds": t3 - t0,
        "self_peak_mb": peak_mb(resource.RUSAGE_SELF),
        "base_mb": base_rss,
        "job_peak_mb": peak_mb(resource.RUSAGE_CHILDREN),
        "parts": {
            "submit(): pickle+hash+write arg": t1 - t0,
            "job start (until started.json)": started - t1,
            "job: verify+load arg, run, pickle+hash+write result": finished - started,
            "job end -> exit.json -> wait() returns": t2 - finished,
            "result(): verify+load result": t3 - t2,
        },
        "exit_to_detect": t2 - exited,
    }


def child_write_read(size: int, workdir: Path) -> dict[str, Any]:
    base_rss = peak_mb(resource.RUSAGE_SELF)
    data = make_payload(size)
    t0 = time.time()
    for name in ("arg.bin", "result.bin"):  # argument there, result back
        with open(workdir / name, "wb") as fh:
            fh.write(data)
        del data
        with open(workdir / name, "rb") as fh:
            data = fh.read()
    seconds = time.time() - t0  # both files kept until now, as kinetic keeps its envelopes
    assert len(data) == size
    return {"seconds": seconds, "self_peak_mb": peak_mb(resource.RUSAGE_SELF), "base_mb": base_rss}


def child_copyfile(size: int, workdir: Path) -> dict[str, Any]:
    base_rss = peak_mb(resource.RUSAGE_SELF)
    src, dst = workdir / "src.bin", workdir / "dst.bin"
    with open(src, "wb") as fh:
        chunk = b"x" * (8 * MB)
        for offset in range(0, size, len(chunk)):
            fh.write(chunk[: size - offset])
    t0 = time.time()
    for _ in range(2):
        shutil.copyfile(src, dst)
        src, dst = dst, src
    seconds = time.time() - t0
    return {"seconds": seconds, "self_peak_mb": peak_mb(resource.RUSAGE_SELF), "base_mb": base_rss}


def child_parts(size: int, workdir: Path) -> dict[str, Any]:
    """Unit costs per pass over the payload, to explain where kinetic's time goes."""
    data = make_payload(size)
    path = workdir / "parts.bin"
    out: dict[str, float] = {}
    t0 = time.time()
    hashlib.sha256(data).hexdigest()
    out["sha256 pass"] = time.time() - t0
    if importlib.util.find_spec("blake3"):
        from blake3 import blake3

        t0 = time.time()
        blake3(data).hexdigest()
        out["blake3 pass (one thread)"] = time.time() - t0
    t0 = time.time()
    with open(path, "wb") as fh:
        fh.write(data)
    out["write pass"] = time.time() - t0
    t0 = time.time()
    with open(path, "rb") as fh:
        while fh.read(8 * MB):
            pass
    out["read pass (8 MiB chunks, page cache)"] = time.time() - t0
    t0 = time.time()
    with open(path, "rb") as fh:
        fh.read()
    out["read into one bytes object"] = time.time() - t0
    t0 = time.time()
    with open(path, "wb") as fh:
        pickle.dump(data, fh, protocol=pickle.HIGHEST_PROTOCOL)
    out["pickle.dump to file"] = time.time() - t0
    t0 = time.time()
    with open(path, "rb") as fh:
        pickle.load(fh)
    out["pickle.load from file"] = time.time() - t0
    path.unlink()
    return {"seconds": 0.0, "parts": out}


CHILDREN = {
    "kinetic": child_kinetic,
    "kinetic-format2": lambda size, workdir: child_kinetic(size, workdir, format2=True),
    "kinetic-ndarray": lambda size, workdir: child_kinetic(size, workdir, ndarray=True),
    "write+read": child_write_read,
    "copyfile": child_copyfile,
    "parts": child_parts,
}


def run_child(variant: str, size: int, workdir: Path) -> dict[str, Any]:
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


def med(values: list[float]) -> float:
    return statistics.median(values)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="payload size in MiB")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    size = args.size_mb * MB
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
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"payload {size / MB:.0f} MiB; load average {load} (cores: {os.cpu_count()})")
    if not importlib.util.find_spec("blake3"):
        print(
            "(blake3 is not installed: 'kinetic' writes format 2 as well; install the fast extra)"
        )
    variants = ["write+read", "copyfile", "kinetic", "kinetic-format2"]
    if importlib.util.find_spec("numpy"):
        variants.append("kinetic-ndarray")  # the same through a NumPy array
    else:
        print("(numpy is not installed: the NumPy array variant is not run)")
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    for _ in range(args.repeats):
        for variant in results:
            results[variant].append(run_child(variant, size, tmp))
    parts = run_child("parts", size, tmp)["parts"]

    moved = 2 * size / MB
    base = med([r["seconds"] for r in results["write+read"]])
    copy = med([r["seconds"] for r in results["copyfile"]])
    print(f"\n{moved:.0f} MiB moved per run (argument + result), median of {args.repeats}")
    print(
        f"{'variant':<16}{'wall s':>9}{'MiB/s':>9}{'vs copyfile':>13}{'vs write+read':>15}"
        f"{'peak RSS MiB':>14}{'x payload':>11}{'job peak MiB':>14}"
    )
    for variant, runs in results.items():
        secs = med([r["seconds"] for r in runs])
        peak = med([r["self_peak_mb"] for r in runs])
        job = med([r["job_peak_mb"] for r in runs]) if "job_peak_mb" in runs[0] else None
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

    old = results["kinetic-format2"]
    print(f"\nwhere the time goes (median){'kinetic':>39}{'format2':>10}")
    for key in kin[0]["parts"]:
        now, before = (med([r["parts"][key] for r in rs]) for rs in (kin, old))
        print(f"  {key:<58}{now:7.2f} s{before:7.2f} s")
    detect = [med([r["exit_to_detect"] for r in rs]) for rs in (kin, old)]
    print(
        f"  {'  of which: supervisor exit -> wait() notices':<58}{detect[0]:7.2f} s{detect[1]:7.2f} s"
    )
    print("unit costs per pass over the payload (one run)")
    for key, value in parts.items():
        print(f"  {key:<58}{value:7.2f} s")

    secs = med([r["seconds"] for r in kin])
    peak = med([r["self_peak_mb"] for r in kin])
    print("\nGoals")
    ok1 = copy / secs >= 0.7
    ok2 = peak <= 1.5 * size / MB
    print(
        f"  throughput >= 0.7x copyfile:         {copy / secs:.2f}x   {'MET' if ok1 else 'MISSED'}"
        f"   ({base / secs:.2f}x write+read; format 2: "
        f"{copy / med([r['seconds'] for r in old]):.2f}x copyfile)"
    )
    print(
        f"  submitter peak RSS <= 1.5x payload:  {peak / (size / MB):.2f}x   "
        f"{'MET' if ok2 else 'MISSED'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
