"""What one Kubernetes poll costs with history in the namespace: list-everything vs by-id.

Against the test cluster of ``tests/kubernetes`` (started here, or ``--kubeconfig`` for
one already running): ``--finished`` (2,000) finished Jobs, each with its Succeeded pod,
as ``ttlSecondsAfterFinished`` keeps them for a day, plus ``--watched`` (200) running
Jobs with a Running pod. Objects are created straight through the API with a tiny spec
(Jobs with ``parallelism: 0`` so the Job controller makes no pods; pods bound to a
registered node that no agent runs, their status written through the status API), so
no process runs. Creation time is printed.

Then, in one process, one ``poll`` of the 200 watched ids per strategy, repeated:

- baseline (the old strategy): LIST every ``app=kinetic`` Job and Pod in the namespace;
- kinetic: ``KubernetesBackend.poll``: LISTs label-selected by the watched ids.

Counted per poll (one poll per interval per namespace): API requests, response bytes,
objects read (``KubeClient.stats``) and wall time (median). Goal: cost independent of
the finished Jobs: bytes per poll >= 10x fewer than the baseline at 2,000 finished.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import load_avg

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "kubernetes")]

from kinetic_core import Target  # noqa: E402
from kinetic_core.backends import BackendState  # noqa: E402
from kinetic_core.backends.kubernetes import KubernetesBackend, job_state  # noqa: E402
from kinetic_core.backends.kubernetes.client import CallStats  # noqa: E402

NODE = "bench-node"  # registered, never run by an agent: its pods stay as written
LABEL = "kinetic-bench"


def old_poll(backend: KubernetesBackend, job_ids: list[str]) -> dict[str, BackendState]:
    """The strategy before issue 12: every app=kinetic Job and Pod of the namespace."""
    query = {"labelSelector": "app=kinetic"}
    jobs = backend.client.call("GET", backend.client.ns("jobs"), query=query)["items"]
    pods = backend.client.call("GET", backend.client.ns("pods"), query=query)["items"]
    by_job = {j["metadata"]["labels"].get("kinetic/job-id"): j for j in jobs}
    pods_by_job: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        pods_by_job.setdefault(pod["metadata"]["labels"].get("kinetic/job-id", ""), []).append(pod)
    return {j: job_state(by_job.get(j), pods_by_job.get(j, [])) for j in job_ids}


def _labels(job_id: str) -> dict[str, str]:
    return {"app": "kinetic", "kinetic/job-id": job_id, LABEL: "1"}


def create_job(backend: KubernetesBackend, job_id: str, finished: bool) -> None:
    c = backend.client
    name = f"kinetic-{job_id}"
    container = {"name": "runner", "image": "none", "command": ["true"]}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": _labels(job_id)},
        "spec": {
            "parallelism": 0,  # the Job controller starts no pod
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": _labels(job_id)},
                "spec": {"restartPolicy": "Never", "containers": [container]},
            },
        },
    }
    c.call("POST", c.ns("jobs"), body=job)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{name}-pod", "labels": _labels(job_id)},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": "Never",
            "containers": [container],
            "tolerations": [{"operator": "Exists"}],
        },
    }
    c.call("POST", c.ns("pods"), body=pod)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    state = (
        {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": stamp}}
        if finished
        else {"running": {"startedAt": stamp}}
    )
    c.call(
        "PATCH",
        c.ns("pods", f"{name}-pod") + "/status",
        body={
            "status": {
                "phase": "Succeeded" if finished else "Running",
                "startTime": stamp,
                "containerStatuses": [
                    {
                        "name": "runner",
                        "image": "none",
                        "imageID": "",
                        "ready": not finished,
                        "restartCount": 0,
                        "state": state,
                    }
                ],
            }
        },
        content_type="application/merge-patch+json",
    )
    if finished:
        c.call(
            "PATCH",
            c.ns("jobs", name) + "/status",
            body={
                "status": {
                    "startTime": stamp,
                    "completionTime": stamp,
                    "succeeded": 1,
                    "conditions": [
                        {
                            "type": "Complete",
                            "status": "True",
                            "lastProbeTime": stamp,
                            "lastTransitionTime": stamp,
                        }
                    ],
                }
            },
            content_type="application/merge-patch+json",
        )


def keep_node_ready(backend: KubernetesBackend, stop: threading.Event) -> None:
    """Post the bench node's Ready status, as a kubelet would, so the node lifecycle
    controller never marks it (and its Running pods) not ready during the run."""
    c = backend.client
    with contextlib.suppress(Exception):  # already registered by an earlier run
        c.call("POST", "/api/v1/nodes", body={"metadata": {"name": NODE}})
    while True:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }
        with contextlib.suppress(Exception):
            c.call(
                "PATCH",
                f"/api/v1/nodes/{NODE}/status",
                body={"status": {"conditions": [ready]}},
                content_type="application/strategic-merge-patch+json",
            )
        if stop.wait(5):
            return


def populate(backend: KubernetesBackend, finished: int, watched: int) -> list[str]:
    done_ids = [f"bench-done-{i}" for i in range(finished)]
    watched_ids = [f"bench-run-{i}" for i in range(watched)]
    began = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda j: create_job(backend, j, True), done_ids))
        list(pool.map(lambda j: create_job(backend, j, False), watched_ids))
    took = time.monotonic() - began
    print(
        f"created {finished} finished + {watched} running Jobs with their pods "
        f"({4 * finished + 3 * watched} requests) in {took:.1f}s"
    )
    return watched_ids


def measure(
    name: str, poll: Any, backend: KubernetesBackend, ids: list[str], repeats: int
) -> tuple[CallStats, float]:
    times: list[float] = []
    before = backend.client.stats.snapshot()
    for _ in range(repeats):
        began = time.perf_counter()
        states = poll(backend, ids)
        times.append(time.perf_counter() - began)
        assert all(s.phase == "running" for s in states.values()), (name, set(states.values()))
    after = backend.client.stats.snapshot()
    per = CallStats(
        requests=(after.requests - before.requests) // repeats,
        bytes=(after.bytes - before.bytes) // repeats,
        objects=(after.objects - before.objects) // repeats,
    )
    return per, statistics.median(times)


def cleanup(backend: KubernetesBackend) -> None:
    c = backend.client
    for kind in ("jobs", "pods"):
        c.call("DELETE", c.ns(kind), query={"labelSelector": LABEL, "gracePeriodSeconds": 0})
    try:
        c.call("DELETE", f"/api/v1/nodes/{NODE}")
    except Exception:
        pass


def start_test_cluster(kubeconfig: str | None) -> Any:
    """The test cluster a benchmark measures: the one ``--kubeconfig`` names (None is
    returned), else one started here, which the caller stops. Sets ``KUBECONFIG``."""
    cluster = None
    if kubeconfig is None:
        from cluster.cluster import TestCluster, ensure_built

        ensure_built()
        cluster = TestCluster()
        cluster.start()
        kubeconfig = str(cluster.kubeconfig_path)
        print(f"test cluster started in {cluster.start_seconds:.1f}s")
    os.environ["KUBECONFIG"] = kubeconfig
    return cluster


def bench_target(**options: Any) -> dict[str, Any]:
    """The Kubernetes target of every benchmark on the test cluster, on a fresh store."""
    storage = f"file://{tempfile.mkdtemp(prefix='kinetic-bench-')}"
    return {
        "backend": "kubernetes",
        "kube_context": "kinetic-test",
        "namespace": "default",
        "storage": storage,
        **options,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--finished", type=int, default=2000)
    parser.add_argument("--watched", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--kubeconfig", help="a running test cluster (else one is started)")
    args = parser.parse_args()
    os.environ["KINETIC_K8S_WATCH"] = "0"  # LIST per poll is measured here; the watch: k8s_watch.py
    print(f"load average: {load_avg()}")
    cluster = start_test_cluster(args.kubeconfig)
    target = Target(**bench_target()).resolve()
    backend = KubernetesBackend(target)
    stop = threading.Event()
    heartbeat = KubernetesBackend(target)  # its own client: its requests are not counted
    threading.Thread(target=keep_node_ready, args=(heartbeat, stop), daemon=True).start()
    try:
        ids = populate(backend, args.finished, args.watched)
        rows = {
            "baseline (LIST all app=kinetic)": measure("old", old_poll, backend, ids, args.repeats),
            "kinetic (LIST by job ids)": measure(
                "new", KubernetesBackend.poll, backend, ids, args.repeats
            ),
        }
    finally:
        stop.set()
        if cluster is not None:
            cluster.stop()
        else:
            cleanup(backend)
    print(
        f"\none poll of {args.watched} watched jobs, {args.finished} finished Jobs present "
        f"(median of {args.repeats}):"
    )
    print(f"{'strategy':34} {'requests':>8} {'objects':>8} {'bytes':>12} {'time':>9}")
    for name, (stats, took) in rows.items():
        print(
            f"{name:34} {stats.requests:8d} {stats.objects:8d} {stats.bytes:12,d} "
            f"{took * 1000:7.1f}ms"
        )
    (old, old_t), (new, new_t) = rows.values()
    print(
        f"ratios baseline/kinetic: requests {old.requests / max(new.requests, 1):.1f}x, "
        f"objects {old.objects / max(new.objects, 1):.1f}x, "
        f"bytes {old.bytes / max(new.bytes, 1):.1f}x, time {old_t / max(new_t, 1e-9):.1f}x"
    )
    ok = old.bytes >= 10 * new.bytes
    print(f"goal bytes >= 10x fewer: {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
