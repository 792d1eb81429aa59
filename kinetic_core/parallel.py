"""Run a function over many items on a few threads.

The data plane's work (hashing, file copies, object uploads) releases the GIL, so plain
threads scale it across cores. Threads are started per call, never pooled: a pool
created before the local backend's zygote forks would be dead in its children.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

#: Parallel transfers: enough to hide per-object latency on GCS, few enough for a laptop.
WORKERS = 16
#: Hashing and local copies are CPU-bound: one thread per core this process may use
#: (hashlib, os.preadv and copy_file_range release the GIL); more only contend.
CORES = max(
    2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 2
)


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
