"""Usage of a real multi-host slice (issue 22, item 1): a ``tpu-v5e-16`` job (4 hosts x 4
chips) whose node is reclaimed mid-run shows the preempted attempt's chip-hours as lost and
its successor's as useful, priced by the target's price table."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import kinetic_core as kc

sys.path.insert(0, str(Path(__file__).resolve().parent))
import k8s_fns
from test_backend import _backend
from test_reliability import _until
from test_spot_reclaim import _lines

EXAMPLE_PRICES = {"currency": "USD", "tpu-v5e": {"on_demand": 2.0, "spot": 0.8}}


def test_a_reclaimed_slice_shows_lost_and_useful_chip_hours(
    kube: kc.Target, k8s_cluster: Any, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    target = kube.merge(
        {"accelerator": "tpu-v5e-16", "max_recoveries": 1, "prices": EXAMPLE_PRICES}
    )
    job = kc.submit(
        k8s_fns.slice_resumable, (str(work),), target=target, idempotency_key=f"u-{uuid.uuid4()}"
    )
    _until("worker 0 half-way", lambda: (work / "halfway").exists())
    _until("every worker started", lambda: len(_lines(work / "starts")) == 4)
    (live,) = job.usage().attempts  # measured while it runs: nothing recorded yet
    assert (live.status, live.chips, live.hosts, live.ended_at) == ("RUNNING", 16, 4, None)
    backend = _backend(target)
    pods = backend.client.call(
        "GET", backend.client.ns("pods"), query={"labelSelector": f"kinetic/job-id={job.job_id}"}
    )["items"]
    (node,) = [
        p["spec"]["nodeName"]
        for p in pods
        if p["metadata"]["labels"]["jobset.sigs.k8s.io/job-index"] == "2"
    ]
    k8s_cluster.delete_node(node, grace=5)
    k8s_cluster.restore_node(node)
    assert job.result(timeout=240, cleanup=False)["resumed_from"] == 5
    usage = job.usage()
    first, second = usage.attempts
    assert [(a.attempt, a.status, a.reason, a.lost) for a in usage.attempts] == [
        (1, "FAILED", "Preempted", True),
        (2, "SUCCEEDED", None, False),
    ]
    for a in usage.attempts:
        assert (a.accelerator, a.chips, a.hosts, a.spot) == ("tpu-v5e-16", 16, 4, False)
        assert a.running_seconds > 0 and a.chip_hours == 16 * a.running_seconds / 3600
        assert a.cost == 2.0 * a.chip_hours  # on-demand price per chip-hour
    assert usage.lost_chip_hours == first.chip_hours > 0
    assert usage.useful_chip_hours == second.chip_hours > 0
    assert usage.chip_hours == first.chip_hours + second.chip_hours
    assert (usage.cost, usage.currency) == (first.cost + second.cost, "USD")  # type: ignore[operator]
    assert kc.usage_summary(kc.list_jobs(), EXAMPLE_PRICES).to_dict() == usage.to_dict()
    assert "lost" in usage.describe() and "tpu-v5e-16 (16 chips)" in usage.describe()
