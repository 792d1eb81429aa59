"""How fast a job's runner starts: spawn -> ``started.json`` of a fresh runner (issue 37, goal 1).

What a Kubernetes pod or a Slurm node runs is a fresh ``python -m kinetic_core.runtime.runner
--storage URI --job-id ID`` (``LaunchSpec.runner_args``: the pod's command, the Slurm
script's ``srun ... exec python ...``), its stdout a pipe (the pod log), so the log tee into
storage is on. Measured side by side in one process, the order rotating every repetition,
medians over ``--repeats``:

- bare:    spawn -> exit of ``python -c pass`` (the floor: one interpreter)
- stdlib:  spawn -> exit of ``python -c "import <the stdlib modules a runner's start loads>"``
           (``STDLIB``: what stays between a bare interpreter and ``started.json``: ``json``
           and the ``re`` and ``enum`` it imports; neither ``typing``, ``dataclasses``,
           ``pathlib``, ``threading`` nor ``signal``, ``tests/core/test_runner_start.py``)
- import:  spawn -> exit of ``python -c "import kinetic_core.runtime.runner"``
- started: spawn -> ``started.json`` written by a real runner of a submitted no-op job
           (file:// storage; the job is submitted to the tests' scripted backend, which
           launches nothing: the benchmark starts the runner itself, as the pod would)
- decided: spawn -> ``outcome.json`` of the same runner, and spawn -> its exit

Goal: started <= 2x bare. ``--compare CHECKOUT`` also starts the runner of another checkout
of the repository (e.g. an export of ``main``) in the same rotation, on jobs of the same
store. The children run without ``PYTHONDONTWRITEBYTECODE`` (an
installed package has its bytecode; the first untimed run writes it here). Then the
runner's heaviest imports by ``python -X importtime``.

    .venv/bin/python bench/runner_start.py [--repeats 20] [--compare /tmp/kc-main]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from common import load_avg, med

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.core.scripted_backend

RUNNER = "kinetic_core.runtime.runner"
STDLIB = "import json, errno"


def noop() -> None:
    return None


def child_env(checkout: Path = ROOT) -> dict[str, str]:
    """The pod's env, roughly: no kinetic settings of this shell, bytecode allowed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KINETIC_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = str(checkout)
    return env


def spawn_to_exit(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, cwd=ROOT, check=True)
    return time.perf_counter() - t0


class Runners:
    """Submits no-op jobs that nothing launches and runs their runners (``checkout``'s)
    as a pod would."""

    def __init__(self, root: Path, checkout: Path = ROOT) -> None:
        import kinetic_core as kc
        from kinetic_core.util import registry

        registry.BACKENDS["scripted"] = "tests.core.scripted_backend:KIND"
        self.kc, self.root, self.checkout = kc, root, checkout
        self.env = child_env(checkout)
        self.uri = f"file://{root}"
        self.last: dict[str, float] = {}

    def run_one(self) -> float:
        job = self.kc.submit(noop, target={"backend": "scripted", "storage": self.uri})
        folder = self.root / "jobs" / job.job_id
        argv = [sys.executable, "-m", RUNNER, "--storage", self.uri, "--job-id", job.job_id]
        t0_ns = time.time_ns()  # the records' mtimes are on the same (real-time) clock
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, env=self.env, cwd=self.checkout, stdout=subprocess.PIPE)
        out, _ = proc.communicate(timeout=60)  # the pod log: a pipe, drained
        exited = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"runner exited {proc.returncode}: {out!r}")
        started = ((folder / "started.json").stat().st_mtime_ns - t0_ns) / 1e9
        decided = ((folder / "outcome.json").stat().st_mtime_ns - t0_ns) / 1e9
        self.last = {"decided": decided, "exited": exited}
        return started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--importtime-repeats", type=int, default=5)
    parser.add_argument("--compare", type=Path, help="another checkout's runner, side by side")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kinetic-bench-runner-start-"))
    try:
        return run(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(args: argparse.Namespace, tmp: Path) -> int:
    env = child_env()
    runners = Runners(tmp / "kinetic")
    extra: dict[str, list[float]] = {"decided": [], "exited": []}

    def started() -> float:
        value = runners.run_one()
        for key, seconds in runners.last.items():
            extra[key].append(seconds)
        return value

    variants: dict[str, Callable[[], float]] = {
        "bare python -c pass": lambda: spawn_to_exit([sys.executable, "-c", "pass"], env),
        "python -c 'import <stdlib of the start>'": lambda: spawn_to_exit(
            [sys.executable, "-c", STDLIB], env
        ),
        f"python -c 'import {RUNNER}'": lambda: spawn_to_exit(
            [sys.executable, "-c", f"import {RUNNER}"], env
        ),
        "runner spawn -> started.json": started,
    }
    if args.compare is not None:
        other = Runners(tmp / "kinetic", args.compare.resolve())
        variants[f"{args.compare} runner -> started.json"] = other.run_one
    print(f"load average before: {load_avg()}  (cores: {os.cpu_count()})")
    names = list(variants)
    for _ in range(args.warmup):
        for fn in variants.values():
            fn()
    for values in extra.values():
        values.clear()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for i in range(args.repeats):  # the order rotates: load changes hit every variant alike
        for name in names[i % len(names) :] + names[: i % len(names)]:
            samples[name].append(variants[name]())
    bare = med(samples[names[0]])
    print(f"\nMedian of {args.repeats}, order rotating (min..max)")
    print(f"{'variant':<44}{'median':>10}{'min':>10}{'max':>10}{'vs bare':>9}")
    rows = {**samples, **{f"runner spawn -> {k}": v for k, v in extra.items()}}
    rows["runner spawn -> outcome.json"] = rows.pop("runner spawn -> decided")
    rows["runner spawn -> exit"] = rows.pop("runner spawn -> exited")
    for name, values in rows.items():
        m = med(values)
        print(
            f"{name:<44}{m * 1e3:8.1f}ms{min(values) * 1e3:8.1f}ms{max(values) * 1e3:8.1f}ms"
            f"{m / bare:8.2f}x"
        )
    ratio = med(samples["runner spawn -> started.json"]) / bare
    print(f"\nGoal: runner spawn -> started.json <= 2x bare: {ratio:.2f}x", end="  ")
    print("MET" if ratio <= 2 else "MISSED")
    print(
        f"\nHeaviest imports of the runner (python -X importtime, median of {args.importtime_repeats})"
    )
    for name, seconds in heaviest(env, args.importtime_repeats):
        print(f"  {name:<48}{seconds * 1e3:7.1f} ms")
    print(f"\nload average after: {load_avg()}")
    return 0


def heaviest(env: dict[str, str], repeats: int) -> list[tuple[str, float]]:
    """The runner's import, and its direct kinetic imports, cumulative (median)."""
    found: dict[str, list[float]] = {}
    for _ in range(repeats):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", f"import {RUNNER}"],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        for line in proc.stderr.splitlines():
            parts = line.removeprefix("import time:").split("|")
            if len(parts) != 3 or not parts[1].strip().isdigit():
                continue
            name = parts[2].rstrip()
            depth = (len(name) - len(name.lstrip())) // 2
            if depth <= 1 and name.strip().startswith(("kinetic_core", "cloudpickle")):
                found.setdefault(name.strip(), []).append(int(parts[1]) / 1e6)
    return sorted(((n, med(v)) for n, v in found.items()), key=lambda x: -x[1])[:12]


if __name__ == "__main__":
    sys.exit(main())
