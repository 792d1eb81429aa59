"""What watching Kubernetes status costs, side by side with polling by LIST.

Against the test cluster of ``tests/kubernetes`` (started here, or ``--kubeconfig`` for one
already running): ``--jobs`` (1,000) Jobs, each with a Running pod, created straight
through the API with a tiny spec, as ``bench/k8s_poll.py`` makes them (Jobs with
``parallelism: 0`` so the Job controller makes no pods; pods bound to a registered node
that no agent runs, their status written through the status API): 1,000 real pods do
not fit this machine, so no process runs, which the output says.

One waiter in this process waits on all of them as ``wait_states`` does (``poll`` of
every id, then ``sleep_until_change`` for ``--interval`` seconds), first with
``KINETIC_K8S_WATCH=0`` (LIST per poll), then with the watch (the default). Counted per
mode (``KubeClient.stats``: every request of the backend's client, the watch's own LISTs,
WATCH requests and the LISTs at one resourceVersion of jobs whose Job and pod streams
disagree included; those jobs are counted apart as "torn"):

- steady state: API requests per minute over ``--seconds`` while nothing changes;
- a wave: ``--wave`` (100) jobs complete (pod status Succeeded, Job Complete, written by
  another client) over the next ``--seconds``: requests per minute, and for each job the
  time from its pod's exit being written to the waiter's ``poll`` reading it ``exited``
  (the backend's part of ``state()`` reading SUCCEEDED; storage reads are the same in
  both modes).

N waiting processes multiply the LIST figures by N; each process's watch is the same
few requests whatever the jobs count.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from common import load_avg

ROOT = Path(__file__).resolve().parent
sys.path[:0] = [str(ROOT.parent), str(ROOT), str(ROOT.parent / "tests" / "kubernetes")]

from k8s_poll import (  # noqa: E402
    NODE,
    bench_target,
    cleanup,
    create_job,
    keep_node_ready,
    start_test_cluster,
)

from kinetic_core import Target  # noqa: E402
from kinetic_core.backends.kubernetes import KubernetesBackend  # noqa: E402
from kinetic_core.backends.kubernetes import watch as kube_watch  # noqa: E402

MODES = {"polling (LIST)": "0", "watch": "1"}


def finish(backend: KubernetesBackend, job_id: str) -> None:
    """The job's pod exits 0 and its Job completes, as the kubelet and Job controller
    would write it."""
    c = backend.client
    name = f"kinetic-{job_id}"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    terminated = {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": stamp}}
    c.call(
        "PATCH",
        c.ns("pods", f"{name}-pod") + "/status",
        body={
            "status": {
                "phase": "Succeeded",
                "containerStatuses": [
                    {
                        "name": "runner",
                        "image": "none",
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": terminated,
                    }
                ],
            }
        },
        content_type="application/merge-patch+json",
    )
    complete = {"type": "Complete", "status": "True", "lastTransitionTime": stamp}
    c.call(
        "PATCH",
        c.ns("jobs", name) + "/status",
        body={"status": {"completionTime": stamp, "succeeded": 1, "conditions": [complete]}},
        content_type="application/merge-patch+json",
    )


class Waiter(threading.Thread):
    """One wait on every job: poll, then sleep until a change or the interval."""

    def __init__(self, backend: KubernetesBackend, ids: list[str], interval: float) -> None:
        super().__init__(daemon=True)
        self.backend, self.ids, self.interval = backend, ids, interval
        self.exited: dict[str, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            states = self.backend.poll(self.ids)
            now = time.monotonic()
            for job_id, state in states.items():
                if state.phase == "exited":
                    self.exited.setdefault(job_id, now)
            self.backend.sleep_until_change(self.ids, self.interval)


def torn() -> int:
    """Jobs (per kind) the watch read by LIST at one resourceVersion so far (watch.py)."""
    return sum(k.torn for w in kube_watch.watches() for k in w.kinds.values())


def requests_per_minute(backend: KubernetesBackend, seconds: float) -> float:
    before = backend.client.stats.snapshot().requests
    time.sleep(seconds)
    return (backend.client.stats.snapshot().requests - before) * 60 / seconds


def run_mode(
    target: Target, writer: KubernetesBackend, ids: list[str], wave: list[str], args: Any
) -> dict[str, float]:
    backend = KubernetesBackend(target)  # its own client: its own request count
    waiter = Waiter(backend, ids, args.interval)
    waiter.start()
    if os.environ[kube_watch.ENV_SWITCH] == "1":
        while not (w := kube_watch.namespace_watch(backend.client)) or not w.synced():
            time.sleep(0.1)
    time.sleep(args.interval)  # past the first polls
    steady = requests_per_minute(backend, args.seconds)
    finished: dict[str, float] = {}
    before, torn_before = backend.client.stats.snapshot().requests, torn()
    began = time.monotonic()
    for job_id in wave:  # spread over the first half of the window
        finish(writer, job_id)
        finished[job_id] = time.monotonic()
        time.sleep(args.seconds / 2 / len(wave))
    time.sleep(max(0.0, args.seconds - (time.monotonic() - began)))
    during = (backend.client.stats.snapshot().requests - before) * 60 / args.seconds
    torn_reads = torn() - torn_before
    waiter.stop.set()
    kube_watch.stop_all()
    lags = [waiter.exited[j] - finished[j] for j in wave if j in waiter.exited]
    missed = len(wave) - len(lags)
    return {
        "steady": steady,
        "wave": during,
        "p50": statistics.median(lags) if lags else float("nan"),
        "p90": statistics.quantiles(lags, n=10)[-1] if len(lags) > 1 else float("nan"),
        "missed": missed,
        "torn": torn_reads,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--wave", type=int, default=100)
    parser.add_argument("--interval", type=float, default=5.0, help="the waiter's poll_interval")
    parser.add_argument("--seconds", type=float, default=60.0, help="each measured window")
    parser.add_argument("--kubeconfig", help="a running test cluster (else one is started)")
    args = parser.parse_args()
    print(f"load average: {load_avg()}")
    cluster = start_test_cluster(args.kubeconfig)
    target = Target(**bench_target()).resolve()
    writer = KubernetesBackend(target)
    stop = threading.Event()
    threading.Thread(target=keep_node_ready, args=(writer, stop), daemon=True).start()
    rows: dict[str, dict[str, float]] = {}
    try:
        ids = [f"bench-run-{i}" for i in range(args.jobs)]
        began = time.monotonic()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda j: create_job(writer, j, False), ids))
        print(
            f"created {args.jobs} Jobs with a Running pod each in {time.monotonic() - began:.1f}s "
            f"(no process runs: pods on node {NODE}, which no agent runs; real pods do not fit)"
        )
        for n, (name, switch) in enumerate(MODES.items()):
            os.environ[kube_watch.ENV_SWITCH] = switch
            wave = ids[n * args.wave : (n + 1) * args.wave]
            rows[name] = run_mode(target, writer, ids, wave, args)
    finally:
        stop.set()
        if cluster is not None:
            cluster.stop()
        else:
            cleanup(writer)
    print(
        f"\none waiter on {args.jobs} jobs, poll_interval {args.interval:g}s, windows of "
        f"{args.seconds:g}s, a wave of {args.wave} completions:"
    )
    print(
        f"{'mode':16} {'req/min steady':>15} {'req/min wave':>13} "
        f"{'exit->seen p50':>15} {'p90':>8} {'missed':>7} {'torn (wave)':>12}"
    )
    for name, r in rows.items():
        print(
            f"{name:16} {r['steady']:15.1f} {r['wave']:13.1f} {r['p50'] * 1000:13.0f}ms "
            f"{r['p90'] * 1000:6.0f}ms {int(r['missed']):7d} {int(r['torn']):12d}"
        )
    old, new = rows["polling (LIST)"], rows["watch"]
    print(
        f"ratios polling/watch: requests steady {old['steady'] / max(new['steady'], 1e-9):.1f}x, "
        f"during the wave {old['wave'] / max(new['wave'], 1e-9):.1f}x, "
        f"exit->seen p50 {old['p50'] / max(new['p50'], 1e-9):.1f}x"
    )


if __name__ == "__main__":
    main()
