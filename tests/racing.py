"""Run a function in many threads released at the same instant (for create-only races)."""

from __future__ import annotations

import threading
from collections.abc import Callable


def race(n: int, fn: Callable[[int], object]) -> list[object]:
    """Run ``fn(i)`` in ``n`` threads released at once; return results or exceptions."""
    barrier = threading.Barrier(n)
    results: list[object] = [None] * n

    def worker(i: int) -> None:
        barrier.wait()
        try:
            results[i] = fn(i)
        except BaseException as exc:
            results[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results
