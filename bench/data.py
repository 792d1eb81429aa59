"""The data plane vs plain copies, side by side in one run, on file:// storage.

1. Payload: a 1 GiB argument + a 1 GiB result through ``submit(identity, (data,))`` vs
   the floor of any file transport (``bench/payload.py``'s floor variant: the bytes
   written once and read once into a new object per direction) and ``shutil.copyfile`` of
   a file of the same size once per direction (each in a fresh subprocess from
   ``bench/payload.py``, so peak RSS figures do not mix). Goals: >= 0.8x the floor's pace
   (issue 37; before it >= 0.7x the copy's); submitter peak RSS <= 1.5x the payload.
2. Data folder: 1 GiB in 1,000 files. Upload = ``Data(folder)`` hashed and stored
   content-addressed (what ``submit`` does); download = the job side fetching it into a
   folder (forced: on file:// storage a job reads the stored copy in place, for free).
   Each vs ``cp -r`` of the same folder. Goal: >= 0.7x ``cp -r``.

``--size-mb`` scales both (default 1024); medians of ``--repeats``. Page cache is warm
for every variant alike (the machine is shared: no cache dropping). The payload variants
take fair turns as in ``bench/payload.py`` (rotated order, a pause before each).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import load_avg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import payload as payload_bench  # bench/payload.py: its per-variant children

MB = 1 << 20


def make_folder(root: Path, size: int, files: int) -> None:
    each = max(1, size // files)
    block = os.urandom(min(each, MB))
    for i in range(files):
        path = root / f"part-{i // 100:02d}" / f"file-{i:04d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(i.to_bytes(8, "big"))  # distinct contents
            left = each - 8
            while left > 0:
                fh.write(block[:left])
                left -= len(block)


def timed(fn: Any, *args: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    value = fn(*args)
    return time.perf_counter() - t0, value


def folder_runs(src: Path, tmp: Path, repeats: int) -> dict[str, list[float]]:
    from kinetic_core.data import inputs as data_module
    from kinetic_core.data.inputs import Data, materialize, prepare
    from kinetic_core.storage import open_storage

    runs: dict[str, list[float]] = {"cp -r": [], "Data upload": [], "Data download": []}
    for i in range(repeats):
        dst = tmp / f"cp-{i}"
        secs, _ = timed(subprocess.run, ["cp", "-r", str(src), str(dst)])
        runs["cp -r"].append(secs)
        shutil.rmtree(dst)
        storage = open_storage(f"file://{tmp}/store-{i}")
        data_module._hashed.clear()  # every upload hashes, as a fresh submitter would
        secs, call = timed(prepare, {"args": (Data(src),), "kwargs": {}}, {}, storage)
        runs["Data upload"].append(secs)
        dest = tmp / f"down-{i}"
        secs, _ = timed(materialize, call["args"][0], storage, str(tmp), str(dest))
        runs["Data download"].append(secs)
        shutil.rmtree(dest)
        shutil.rmtree(tmp / f"store-{i}", ignore_errors=True)
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="payload and folder size")
    parser.add_argument("--files", type=int, default=1000, help="files in the folder")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", choices=("payload", "folder"), help="run one part")
    args = parser.parse_args()
    size = args.size_mb * MB
    tmp = Path(tempfile.mkdtemp(prefix="kinetic-bench-data-"))
    try:
        free = shutil.disk_usage(tmp).free
        if free < 5 * size + 1024 * MB:
            raise SystemExit(f"{tmp} has {free / MB:.0f} MiB free; need ~{5 * size / MB:.0f} MiB")
        load = load_avg()
        print(f"size {size / MB:.0f} MiB; load average {load} (cores: {os.cpu_count()})")

        if args.only != "folder":
            payload_part(size, tmp, args.repeats)
        if args.only != "payload":
            folder_part(size, tmp, args.repeats, args.files)
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def payload_part(size: int, tmp: Path, repeats: int) -> None:
    """1. An argument and a result through file:// storage vs the floor of any file
    transport (``bench/payload.py``'s floor variant) and copyfile."""
    pay: dict[str, list[dict[str, Any]]] = {"copyfile": [], "floor": [], "kinetic": []}
    for turn in range(repeats):  # fair turns, as in bench/payload.py (order, pause)
        for variant in payload_bench.turns(list(pay), turn):
            pay[variant].append(payload_bench.run_child(variant, size, tmp))
    copy_s = statistics.median(r["seconds"] for r in pay["copyfile"])
    floor_s = statistics.median(r["seconds"] for r in pay["floor"])
    kin_s = statistics.median(r["seconds"] for r in pay["kinetic"])
    peak = statistics.median(r["self_peak_mb"] for r in pay["kinetic"])
    ratio, goal = floor_s / kin_s, payload_bench.FLOOR_GOAL
    rss = peak / (size / MB)
    print(f"\n1. argument + result, {2 * size / MB:.0f} MiB moved (median of {repeats})")
    print(f"   copyfile x2      {copy_s:7.2f} s")
    print(f"   floor x2         {floor_s:7.2f} s")
    print(
        f"   kinetic          {kin_s:7.2f} s   {ratio:.2f}x the floor   goal >= {goal}x  "
        f"{'MET' if ratio >= goal else 'MISSED'}   ({copy_s / kin_s:.2f}x copyfile)"
    )
    print(
        f"   submitter peak RSS {peak:.0f} MiB = {rss:.2f}x payload   goal <= 1.5x  "
        f"{'MET' if rss <= 1.5 else 'MISSED'}"
    )


def folder_part(size: int, tmp: Path, repeats: int, files: int) -> None:
    """2. A folder of many files as Data (upload, download) vs cp -r."""
    src = tmp / "folder"
    make_folder(src, size, files)
    os.sync()  # the generated folder's writeback would otherwise slow whichever runs first
    runs = folder_runs(src, tmp, repeats)
    cp_s = statistics.median(runs["cp -r"])
    print(f"\n2. folder of {files} files, {size / MB:.0f} MiB (median of {repeats})")
    print(f"   cp -r            {cp_s:7.2f} s")
    for name in ("Data upload", "Data download"):
        secs = statistics.median(runs[name])
        ratio = cp_s / secs
        print(
            f"   {name:<16} {secs:7.2f} s   {ratio:.2f}x cp -r   goal >= 0.7x  "
            f"{'MET' if ratio >= 0.7 else 'MISSED'}"
        )


if __name__ == "__main__":
    sys.exit(main())
