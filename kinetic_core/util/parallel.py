"""Run a function over many items on a few threads.

The data plane's work (hashing, file copies, object uploads) releases the GIL, so plain
threads scale it across cores. Threads are started per call, never pooled: a pool
created before the local backend's zygote forks would be dead in its children.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Iterable
from os import PathLike
from typing import Any

CGROUP_ROOT = "/sys/fs/cgroup"


def quota_cores(
    root: str | PathLike[str] = CGROUP_ROOT, membership: str | None = None
) -> int | None:
    """The CPUs a cgroup CPU limit allows (a pod's ``resources.limits.cpu``), rounded up;
    None without a limit. Reads cgroup v2 ``cpu.max`` or v1 ``cpu.cfs_quota_us``, in this
    process's own cgroup (``membership``: /proc/self/cgroup) or at the mount's root, where
    a container sees its own cgroup. Paths with os.path, not pathlib: the envelope
    imports this module on a job's path."""
    if membership is None:
        membership = _read("/proc/self/cgroup") or ""
    join = os.path.join
    candidates: list[tuple[str, str | None]] = []
    for line in membership.splitlines():
        if line.count(":") < 2:
            continue
        hierarchy, controllers, own = line.split(":", 2)
        own = own.lstrip("/")
        if hierarchy == "0" and controllers == "":  # cgroup v2
            candidates += [(join(root, own, "cpu.max"), None), (join(root, "cpu.max"), None)]
        elif "cpu" in controllers.split(","):
            for base in (join(root, "cpu", own), join(root, "cpu")):
                candidates.append((join(base, "cpu.cfs_quota_us"), join(base, "cpu.cfs_period_us")))
    for quota_file, period_file in candidates:
        fields = (_read(quota_file) or "").split()
        if period_file is not None:
            fields.append((_read(period_file) or "").strip())
        try:
            quota, period = fields[0], float(fields[1])
        except (IndexError, ValueError):
            continue
        if quota in ("max", "-1"):
            return None
        try:
            return max(1, math.ceil(float(quota) / period))
        except (ValueError, ZeroDivisionError):
            continue
    return None


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


def _usable_cores() -> int:
    affinity = (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 2
    )
    return max(2, min(affinity, quota_cores() or affinity))


#: Parallel transfers: enough to hide per-object latency on GCS, few enough for a laptop.
WORKERS = 16
#: Hashing and local copies are CPU-bound: one thread per core this process may use
#: (hashlib, os.preadv and copy_file_range release the GIL), within a container's CPU
#: limit; more only contend.
CORES = _usable_cores()


def parallel(fn: Callable[[Any], Any], items: Iterable[Any], workers: int = WORKERS) -> None:
    """``fn(item)`` for every item on up to ``workers`` threads, each pulling the next item
    (no future per item: thousands of small files cost no scheduling); the first error is
    raised once all threads stopped."""
    todo = list(items)
    if len(todo) <= 1 or workers <= 1:
        for item in todo:
            fn(item)
        return
    pending = iter(todo)
    errors: list[BaseException] = []

    def work() -> None:
        for item in pending:  # a list iterator hands each item to exactly one thread
            if errors:
                return
            try:
                fn(item)
            except BaseException as exc:
                errors.append(exc)
                return

    threads = [threading.Thread(target=work, daemon=True) for _ in range(min(workers, len(todo)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
