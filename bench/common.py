"""What the benchmarks share: the load average as each prints it beside its figures, and the
median they report. Each script runs as ``python bench/NAME.py``, so this folder is first on
``sys.path`` and ``from common import ...`` finds this module."""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterable


def load_avg() -> str:
    """The 1-, 5- and 15-minute load averages, e.g. ``0.52 1.59 3.05``."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def med(values: Iterable[float]) -> float:
    """The median; NaN where a variant produced no value."""
    values = list(values)
    return statistics.median(values) if values else float("nan")
