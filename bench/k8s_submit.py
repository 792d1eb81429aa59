"""Submits per second on Kubernetes vs bare Job creates, side by side in one process (issue 37).

- bare: ``--n`` (50) ``batch/v1`` Jobs POSTed one after another (each pod runs the same
  interpreter with ``-c pass``): creates per second, the API's speed from one process;
- kinetic: ``--n`` ``kc.submit(noop, target=...)`` one after another: submits per second
  (goal >= 0.5x bare);
- submit_map: ``kc.submit_map(noop, range(--children), max_concurrency=--children)``: from
  the call to every child launched (its ``launched.json`` in storage) by the batch's
  driver, a Job of the cluster; and the driver's own rate, from its first child's launch
  record to its last: children per second (goal >= 100/s).

Each phase runs ``--repeats`` (2) times, the order rotating; between phases every Job and
pod is deleted and the cluster left to settle (no pod left), so each starts on a quiet
cluster. Medians; the load average before and after. Starts the test cluster of
``tests/kubernetes`` (the driver pod's service account is granted what a driver needs).
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from common import load_avg

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "tests" / "kubernetes")]

from k8s_poll import bench_target, start_test_cluster  # noqa: E402
from k8s_roundtrip import bare_job_body  # noqa: E402

import kinetic_core as kc  # noqa: E402
from kinetic_core.backends import get_backend  # noqa: E402
from kinetic_core.backends.kubernetes import KubernetesBackend  # noqa: E402
from kinetic_core.backends.kubernetes.client import KubeApiError  # noqa: E402
from kinetic_core.batch.driver import driver_jobs  # noqa: E402
from kinetic_core.batch.manifest import child_job_id  # noqa: E402
from kinetic_core.records import layout  # noqa: E402
from kinetic_core.records.lifecycle import read_json  # noqa: E402
from kinetic_core.storage import open_storage  # noqa: E402

GOAL_SUBMIT = 0.5  # kinetic submits / bare creates
GOAL_CHILDREN = 100.0  # children launched per second by submit_map's driver
BARE_LABEL = "kinetic-bench-submit"
TIMEOUT = float(os.environ.get("KINETIC_BENCH_TIMEOUT", "300"))


def noop(_: int = 0) -> None:
    """The job: nothing (one input per child of ``submit_map``)."""


#: ``--pending``: every pod (bare and kinetic) waits for a node that does not exist, so no
#: job's process competes with the API server for the machine's cores.
NOWHERE = {"kinetic-bench": "nowhere"}


def bare(backend: KubernetesBackend, n: int, pending: bool = False) -> float:
    """Seconds to POST ``n`` Jobs one after another."""
    c = backend.client
    began = time.perf_counter()
    for _ in range(n):
        name = f"bare-{uuid.uuid4().hex[:10]}"
        labels = {BARE_LABEL: "1"}
        pod = {"nodeSelector": NOWHERE} if pending else {}
        c.call("POST", c.ns("jobs"), body=bare_job_body(name, labels, **pod))
    return time.perf_counter() - began


def kinetic(target: kc.Target, n: int) -> float:
    """Seconds for ``n`` ``kc.submit`` calls one after another."""
    began = time.perf_counter()
    for _ in range(n):
        kc.submit(noop, target=target)
    return time.perf_counter() - began


def batch(target: kc.Target, n: int, spans: list[float]) -> float:
    """Seconds from ``submit_map`` to every child launched (``launched.json`` stored); the
    driver's own span (its first child's launch record to its last) joins ``spans``."""
    storage = open_storage(target.storage or "")
    began = time.perf_counter()
    group = kc.submit_map(noop, range(n), target=target, max_concurrency=n)
    keys = [layout.job_file(child_job_id(group.group_id, i, 1), layout.LAUNCHED) for i in range(n)]
    deadline = time.monotonic() + TIMEOUT
    left = keys
    while left:
        left = [k for k in left if not storage.exists(k)]
        if time.monotonic() > deadline:
            print(f"statuses: {group.statuses()}; failures: {group.records.submission_failures()}")
            for driver in driver_jobs(group.records):
                print(f"driver {driver.job_id}: {driver.state()}\n{driver.logs(tail=30)}")
            raise SystemExit(f"{len(left)} of {n} children not launched after {TIMEOUT} s")
        time.sleep(0.02)
    took = time.perf_counter() - began
    stamps = [(read_json(storage, k) or {}).get("at") for k in keys]
    known = [a for a in stamps if isinstance(a, int | float)]
    if len(known) == n:
        spans.append(max(known) - min(known))
    return took


def settle(backend: KubernetesBackend) -> None:
    """Delete every Job and pod of the bench, then wait until no pod is left."""
    c = backend.client
    for selector in ("app=kinetic", BARE_LABEL):
        c.call(
            "DELETE",
            c.ns("jobs"),
            query={"labelSelector": selector, "propagationPolicy": "Background"},
        )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        pods = c.call("GET", c.ns("pods"))["items"]
        left = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        if not pods:
            return
        for pod in left:
            with contextlib.suppress(KubeApiError):  # gone meanwhile
                c.call("DELETE", c.ns("pods", pod["metadata"]["name"]), query=None)
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50)
    parser.add_argument("--children", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--pending",
        action="store_true",
        help="no pod runs (a node selector no node has): the API's speed alone",
    )
    args = parser.parse_args()
    print(f"load average: {load_avg()}")
    # The test cluster's pods run as this machine's processes and import kinetic_core
    # through PYTHONPATH: this checkout's, not whatever the interpreter has installed.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    compileall.compile_dir(str(ROOT / "kinetic_core"), quiet=1)  # the pods import this checkout
    cluster = start_test_cluster(None)
    from cluster.cluster import KINETIC_RULES

    cluster.grant("default", KINETIC_RULES)  # the driver pod's service account
    kubeconfig = str(cluster.kubeconfig_path)
    target = kc.Target(**bench_target(poll_interval=0.5, kubeconfig=kubeconfig))
    runs = target.merge({"node_selector": NOWHERE}) if args.pending else target
    backend = get_backend(target.resolve())
    assert isinstance(backend, KubernetesBackend)
    times: dict[str, list[float]] = {"bare": [], "kinetic": [], "batch": []}
    spans: list[float] = []
    phases: dict[str, Any] = {
        "bare": lambda: bare(backend, args.n, args.pending),
        "kinetic": lambda: kinetic(runs, args.n),
        "batch": lambda: batch(target, args.children, spans),
    }
    try:
        kc.submit(noop, target=target).result(timeout=120)  # warm-up: discovery, the watch
        order = list(phases)
        for r in range(args.repeats):
            for which in order[r % 3 :] + order[: r % 3]:
                settle(backend)
                times[which].append(phases[which]())
        settle(backend)
        print(f"load average: {load_avg()}")
        bare_rate = args.n / statistics.median(times["bare"])
        kinetic_rate = args.n / statistics.median(times["kinetic"])
        children_rate = args.children / statistics.median(times["batch"])
        ratio = kinetic_rate / bare_rate
        how = "no pod runs" if args.pending else "their pods run"
        print(
            f"\none process, {args.n} in a row ({how}), median of {args.repeats}, order rotating:"
        )
        print(f"  bare Job creates:  {bare_rate:7.1f}/s")
        print(f"  kc.submit:         {kinetic_rate:7.1f}/s")
        met = "met" if ratio >= GOAL_SUBMIT else "NOT met"
        print(f"  ratio:             {ratio:7.2f}x (goal >= {GOAL_SUBMIT}x: {met})")
        # The driver's rate: over its span from the first child's launch to the last (the
        # first n-1 intervals); end to end adds the driver job's own start (a pod, a runner).
        driver_rate = (args.children - 1) / statistics.median(spans) if spans else 0.0
        met = "met" if driver_rate >= GOAL_CHILDREN else "NOT met"
        print(f"\nsubmit_map of {args.children} children (driver job on the cluster):")
        print(f"  driver's launches: {driver_rate:7.1f}/s (goal >= {GOAL_CHILDREN:g}/s: {met})")
        print(
            f"  call -> every child launched: {children_rate:7.1f}/s (the driver pod's start included)"
        )
        print(f"  bare Job creates:  {bare_rate:7.1f}/s (the same run's API speed)")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
