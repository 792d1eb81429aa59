"""A detached batch on the Kubernetes test cluster: the submitter process exits right
after ``submit_map`` returns; the batch's driver runs as a Job of the cluster and
launches every child, ``max_concurrency`` respected (as the children saw it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import kinetic_core as kc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cluster.cluster import KINETIC_RULES

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

SUBMITTER = r"""
import json, sys
import kinetic_core as kc
import k8s_fns

target, slots = kc.Target.from_dict(json.loads(sys.argv[1])), sys.argv[2]
batch = kc.submit_map(k8s_fns.slotted, [(i, slots) for i in range(8)], target=target,
                      max_concurrency=3)
print(json.dumps({"group_id": batch.group_id}), flush=True)
"""


@pytest.mark.timeout(300)
def test_batch_runs_on_the_cluster_after_its_submitter_exits(
    k8s_cluster: Any, tmp_path: Path
) -> None:
    k8s_cluster.grant("default", KINETIC_RULES)  # the driver pod's own service account
    slots = tmp_path / "slots"
    slots.mkdir()
    target = kc.Target(
        backend="kubernetes",
        kube_context="kinetic-test",
        kubeconfig=str(k8s_cluster.kubeconfig_path),  # the driver pod reads it too
        namespace="default",
        storage=f"file://{tmp_path / 'store'}",
        pickle_by_value=["k8s_fns"],
        poll_interval=0.5,
    )
    done = subprocess.run(
        [sys.executable, "-c", SUBMITTER, json.dumps(target.to_dict()), str(slots)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{HERE}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    group_id = json.loads(done.stdout.splitlines()[-1])["group_id"]

    batch = kc.attach_batch(group_id, target=target)
    deadline = time.monotonic() + 240
    statuses = batch.statuses()  # reads only: this process launches nothing
    while not all(s.terminal for s in statuses) and time.monotonic() < deadline:
        time.sleep(0.5)
        statuses = batch.statuses()
    assert statuses == ["SUCCEEDED"] * 8
    runs = sorted(
        int(line.split()[0]) for line in (tmp_path / "slots.runs").read_text().splitlines()
    )
    assert runs == list(range(8)), "each child ran once"
    seen = [int(p.read_text()) for p in tmp_path.glob("slots.seen-*")]
    assert len(seen) == 8 and max(seen) <= 3, f"max_concurrency exceeded: {seen}"
    assert batch.results(cleanup=False, timeout=60) == list(range(8))
