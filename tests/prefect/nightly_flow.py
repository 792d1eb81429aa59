"""The nightly Prefect flow of ``make demo`` (``dags_examples/nightly_training_prefect.py``,
the very file) run once, and what a successful run leaves in storage: shared by the tests
that run it on a cluster by configuration only (``test_examples_k8s.py``,
``test_examples_slurm.py``)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_nightly_flow() -> dict[str, Any]:
    """Run the flow (two learning rates, a small dataset); it must publish. Its summary."""
    spec = importlib.util.spec_from_file_location(
        "nightly_prefect_e2e", ROOT / "dags_examples" / "nightly_training_prefect.py"
    )
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    summary: dict[str, Any] = asyncio.run(example.nightly_training(n_samples=400, lrs=(0.1, 0.3)))
    assert summary["registry"]["published"] is True
    return summary


def check_nightly_outputs(storage: Any, summary: dict[str, Any]) -> dict[str, Any]:
    """Both trained models and the published one are in ``storage``; the registry's record."""
    outputs = storage.walk("outputs")
    assert sum(name.endswith("/model.json") for name in outputs) == 3  # 2 trained + published
    best: dict[str, Any] = json.loads(
        storage.read_bytes(f"outputs/{summary['registry']['job_id']}/best.json")
    )
    assert best["mse"] == summary["mse"] < 0.05
    return best
