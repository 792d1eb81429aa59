"""Multi-host slices on the test cluster (issue 19), side by side in one process.

1. submit -> all workers running: one 4-worker ``tpu-v5e-16`` job (one JobSet) vs 4
   single-host jobs of 4 chips each on the same 4 slice nodes (four Jobs), from the first
   ``submit`` to the moment the 4th pod reads Running (median of ``--repeats``); ratio.
2. API requests per poll for ``--watched`` (50) multi-host jobs, each a suspended JobSet
   waiting in a Kueue LocalQueue (the most a poll reads: Jobs, Pods, JobSets and the
   Workloads of the queued ones; no pods run, so the 2 shared cores stay free): requests
   counted by the client (``KubeClient.stats``) and by the API server's audit log.

Against the test cluster of ``tests/kubernetes`` (started here, or ``--kubeconfig``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from common import load_avg

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "tests" / "kubernetes")]

from k8s_poll import bench_target, start_test_cluster  # noqa: E402

import kinetic_core as kc  # noqa: E402
from kinetic_core.backends import get_backend  # noqa: E402
from kinetic_core.backends.kubernetes import USER_AGENT, KubernetesBackend  # noqa: E402

SLICE_SELECTOR = {
    "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
    "cloud.google.com/gke-tpu-topology": "4x4",
}


def nap(seconds: float) -> None:
    """The job body: sleep until cancelled."""
    time.sleep(seconds)


def running_pods(backend: KubernetesBackend, job_ids: list[str]) -> int:
    selector = f"kinetic/job-id in ({','.join(job_ids)})"
    pods = backend.client.call("GET", backend.client.ns("pods"), query={"labelSelector": selector})[
        "items"
    ]
    return sum(p["status"].get("phase") == "Running" for p in pods)


def until_running(backend: KubernetesBackend, jobs: list[kc.JobHandle], count: int) -> None:
    ids = [j.job_id for j in jobs]
    deadline = time.monotonic() + 180
    while running_pods(backend, ids) < count:
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {count} running pods of {ids}")
        time.sleep(0.05)


def stop(backend: KubernetesBackend, jobs: list[kc.JobHandle]) -> None:
    for job in jobs:
        job.cancel()
    ids = [j.job_id for j in jobs]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        selector = f"kinetic/job-id in ({','.join(ids)})"
        if not backend.client.call(
            "GET", backend.client.ns("pods"), query={"labelSelector": selector}
        )["items"]:
            return
        time.sleep(0.2)


def to_running(base: kc.Target, backend: KubernetesBackend, slice_: bool) -> float:
    """Seconds from the first submit to 4 running pods."""
    began = time.perf_counter()
    if slice_:
        jobs = [kc.submit(nap, (600,), target=base.merge({"accelerator": "tpu-v5e-16"}))]
    else:
        single = base.merge({"accelerator": "tpu-v5e-4", "node_selector": SLICE_SELECTOR})
        jobs = [kc.submit(nap, (600,), target=single) for _ in range(4)]
    until_running(backend, jobs, 4)
    took = time.perf_counter() - began
    stop(backend, jobs)
    return took


def _audited(cluster: Any) -> int:
    return sum(
        cluster.count_requests("list", kind, USER_AGENT)
        for kind in ("jobs", "pods", "jobsets", "workloads")
    )


def per_poll(backend: KubernetesBackend, ids: list[str], cluster: Any) -> tuple[int, int | None]:
    """(requests the client made, LISTs the audit log saw) for one poll of ``ids``, by LIST
    (the watch's cost: bench/k8s_watch.py)."""
    os.environ["KINETIC_K8S_WATCH"] = "0"
    backend.poll(ids)  # discovery, once per client
    time.sleep(2)  # the audit log is written in batches
    before_audit = _audited(cluster) if cluster else 0
    before = backend.client.stats.snapshot().requests
    backend.poll(ids)
    made = backend.client.stats.snapshot().requests - before
    if cluster is None:
        return made, None
    time.sleep(2)
    return made, _audited(cluster) - before_audit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--watched", type=int, default=50)
    parser.add_argument("--kubeconfig", help="a running test cluster (else one is started)")
    args = parser.parse_args()
    print(f"load average: {load_avg()}")
    cluster = start_test_cluster(args.kubeconfig)
    base = kc.Target(**bench_target(poll_interval=0.5))
    backend = get_backend(base.resolve())
    assert isinstance(backend, KubernetesBackend)
    try:
        times: dict[str, list[float]] = {"slice": [], "single": []}
        for _ in range(args.repeats):  # interleaved: the same load for both
            times["slice"].append(to_running(base, backend, True))
            times["single"].append(to_running(base, backend, False))
        one, four = statistics.median(times["slice"]), statistics.median(times["single"])
        print(f"\nsubmit -> 4 workers running (median of {args.repeats}):")
        print(f"  one 4-worker slice (JobSet):   {one:6.2f}s")
        print(f"  4 single-host jobs (4 Jobs):   {four:6.2f}s")
        print(f"  ratio slice / single-host:     {one / four:6.2f}x")

        queued = base.merge({"accelerator": "tpu-v5e-16", "queue": "bench-no-such-queue"})
        jobs = [kc.submit(nap, (1,), target=queued) for _ in range(args.watched)]
        ids = [j.job_id for j in jobs]
        observer = KubernetesBackend(queued.resolve())  # its own client and counters
        made, seen = per_poll(observer, ids, cluster)
        states = observer.poll(ids)
        reasons = {s.reason for s in states.values()}
        print(f"\none poll of {args.watched} watched multi-host jobs, queued ({reasons}):")
        print(f"  requests per poll: {made} (client), {seen} LISTs (audit log)")
        stop(backend, jobs)
    finally:
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    main()
