"""A kinetic round trip on Kubernetes vs a bare Job, side by side in one process (issue 37).

- kinetic: ``kc.submit(noop, target=...)`` -> ``result()`` (its cleanup included);
- bare: POST a ``batch/v1`` Job whose pod runs the same interpreter with ``-c pass``, then
  WATCH it until it reads Complete (its DELETE follows, outside the timed part, counted).

``--repeats`` (20) of each, the order rotating every repetition (kinetic first, then bare
first), ``--settle`` seconds apart (the last trip's pod ends meanwhile), after one untimed warm-up of each (the namespace watch, discovery). Printed: the
medians, the ratio kinetic / bare, API requests per trip by verb and resource (every request
of this process's Kubernetes clients, counted at ``KubeClient._request`` and ``watch``; the
namespace watch's long-lived streams are counted apart: they serve every job of the
process), and where a kinetic trip's time goes from its own records (submit returned,
``started.json``, ``outcome.json``, ``finished.json``, the value in hand before the
cleanup, the cleanup, returned) and this process's watch (the job's last event). The
checkout's bytecode is written first: the pods import it, and with
``PYTHONDONTWRITEBYTECODE`` inherited each pod would compile what is stale. The runner's own start
(spawn -> ``started.json``) is issue 37's goal 1: ``--import-cost`` prints what
``import kinetic_core.runner`` costs against a bare interpreter, for the share of the gap.

Against the test cluster of ``tests/kubernetes`` (started here, or ``--kubeconfig``).
"""

from __future__ import annotations

import argparse
import collections
import compileall
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from common import load_avg

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench"), str(ROOT / "tests" / "kubernetes")]

from k8s_poll import bench_target, start_test_cluster  # noqa: E402

import kinetic_core as kc  # noqa: E402
from kinetic_core.backends import get_backend  # noqa: E402
from kinetic_core.backends.kubernetes import KubernetesBackend  # noqa: E402
from kinetic_core.backends.kubernetes.client import KubeClient  # noqa: E402
from kinetic_core.records import layout  # noqa: E402
from kinetic_core.records.lifecycle import read_json  # noqa: E402
from kinetic_core.storage import open_storage  # noqa: E402

GOAL_RATIO = 2.0
GOAL_REQUESTS = 8


def noop() -> None:
    """The job: nothing."""


class Requests:
    """Every request of every KubeClient of this process, by (method, resource[, list])."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: collections.Counter[str] = collections.Counter()
        self.watches = 0
        request, watch = KubeClient._request, KubeClient.watch
        counts = self

        def counted_request(client: KubeClient, method: str, path: str, *rest: Any) -> Any:
            counts.add(method, path)
            return request(client, method, path, *rest)

        def counted_watch(client: KubeClient, path: str, *args: Any, **kw: Any) -> Any:
            counts.add("WATCH", path)
            with counts.lock:
                counts.watches += 1
            return watch(client, path, *args, **kw)

        KubeClient._request = counted_request  # type: ignore[method-assign]
        KubeClient.watch = counted_watch  # type: ignore[method-assign]

    def add(self, method: str, path: str) -> None:
        parts = path.strip("/").split("/")
        resource = parts[-1] if len(parts) % 2 == 0 or "namespaces" not in parts else parts[-2]
        if "namespaces" in parts:
            after = parts[parts.index("namespaces") + 2 :]
            resource = after[0] if after else "namespaces"
            if method == "GET" and len(after) == 1:  # WATCH stays WATCH
                method = "LIST"
            if method == "DELETE" and len(after) == 1:
                method = "DELETE-collection"
        with self.lock:
            self.counts[f"{method} {resource}"] += 1

    @contextmanager
    def trip(self, into: list[collections.Counter[str]]) -> Iterator[None]:
        with self.lock:
            before = collections.Counter(self.counts)
        yield
        with self.lock:
            into.append(self.counts - before)


def bare_job_body(name: str, labels: dict[str, str], **pod: Any) -> dict[str, Any]:
    """A Job running ``python -c pass`` once (``pod``: more pod spec fields)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    **pod,
                    "containers": [
                        {"name": "main", "image": "python", "command": ["python", "-c", "pass"]}
                    ],
                },
            },
        },
    }


def bare_job(backend: KubernetesBackend, requests: Requests) -> float:
    """POST a Job running ``python -c pass``, WATCH it to Complete: seconds; then DELETE."""
    c = backend.client
    name = f"bare-{uuid.uuid4().hex[:10]}"
    labels = {"kinetic-bench": "roundtrip"}
    job = bare_job_body(name, labels)
    began = time.perf_counter()
    created = c.call("POST", c.ns("jobs"), body=job)
    query = {
        "fieldSelector": f"metadata.name={name}",
        "resourceVersion": created["metadata"]["resourceVersion"],
        "timeoutSeconds": "60",
    }
    done = False
    for event in c.watch(c.ns("jobs"), query, read_timeout=90):
        conditions = ((event.get("object") or {}).get("status") or {}).get("conditions") or []
        if any(x["type"] in ("Complete", "Failed") and x["status"] == "True" for x in conditions):
            done = True
            break
    took = time.perf_counter() - began
    if not done:
        raise SystemExit(f"bare Job {name} did not complete within 60 s")
    c.call("DELETE", c.ns("jobs", name), query={"propagationPolicy": "Background"})
    return took


#: job id -> wall time of the last watch event that changed it (``KubernetesBackend.on_change``)
CHANGED: dict[str, float] = {}


def kinetic_trip(target: kc.Target, marks: dict[str, list[float]]) -> float:
    """``submit(noop)`` -> ``result()`` with its cleanup: seconds; the trip's marks."""
    began_wall, began = time.time(), time.perf_counter()
    job = kc.submit(noop, target=target)
    submitted = time.perf_counter()
    value_at = [0.0]
    real_cleanup = job._cleanup_collected

    def timed_cleanup(timeout: float | None) -> None:  # result() has the value, collected
        value_at[0] = time.time()
        real_cleanup(timeout)

    object.__setattr__(job, "_cleanup_collected", timed_cleanup)  # a frozen handle: this one
    job.result(timeout=120)
    returned = time.perf_counter()
    storage = open_storage(target.storage or "")
    started = read_json(storage, layout.job_file(job.job_id, layout.STARTED)) or {}
    outcome = read_json(storage, layout.job_file(job.job_id, layout.OUTCOME)) or {}
    finished = read_json(storage, layout.job_file(job.job_id, layout.FINISHED)) or {}
    if "at" in started and "at" in outcome:
        returned_wall = began_wall + returned - began
        marks["submit returned"].append(submitted - began)
        marks["submit -> started.json"].append(started["at"] - began_wall - (submitted - began))
        marks["started.json -> outcome.json"].append(outcome["at"] - started["at"])
        marks["outcome.json -> result() returned"].append(returned_wall - outcome["at"])
        if "at" in finished:
            marks["  outcome.json -> finished.json"].append(finished["at"] - outcome["at"])
        seen = CHANGED.get(job.job_id, 0.0)
        if seen > outcome["at"]:  # the pod's exit, as this process's watch saw it
            marks["  outcome.json -> last watch event"].append(seen - outcome["at"])
        if value_at[0]:
            marks["  outcome.json -> value (before cleanup)"].append(value_at[0] - outcome["at"])
            marks["  cleanup"].append(returned_wall - value_at[0])
    return returned - began


def import_cost(repeats: int) -> tuple[float, float]:
    """Median seconds of ``python -c pass`` and of ``python -c 'import kinetic_core.runner'``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def once(code: str) -> float:
        began = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=env)
        return time.perf_counter() - began

    bare = [once("pass") for _ in range(repeats)]
    runner = [once("import kinetic_core.runner") for _ in range(repeats)]
    return statistics.median(bare), statistics.median(runner)


def per_trip(trips: list[collections.Counter[str]]) -> tuple[float, str]:
    total = collections.Counter[str]()
    for t in trips:
        total += t
    n = len(trips)
    detail = ", ".join(f"{k} {v / n:.1f}" for k, v in sorted(total.items()))
    return sum(total.values()) / n, detail


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument(
        "--settle", type=float, default=1.0, help="seconds between trips (the last one's pods end)"
    )
    parser.add_argument("--kubeconfig", help="a running test cluster (else one is started)")
    args = parser.parse_args()
    print(f"load average: {load_avg()}")
    requests = Requests()
    # The test cluster's pods run as this machine's processes and import kinetic_core
    # through PYTHONPATH: this checkout's, not whatever the interpreter has installed.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    compileall.compile_dir(str(ROOT / "kinetic_core"), quiet=1)
    cluster = start_test_cluster(args.kubeconfig)
    target = kc.Target(**bench_target(poll_interval=0.5))
    backend = get_backend(target.resolve())
    assert isinstance(backend, KubernetesBackend)
    backend.on_change(lambda job_id: CHANGED.__setitem__(job_id, time.time()))
    times: dict[str, list[float]] = {"kinetic": [], "bare": []}
    trips: dict[str, list[collections.Counter[str]]] = {"kinetic": [], "bare": []}
    marks: dict[str, list[float]] = collections.defaultdict(list)
    try:
        kinetic_trip(target, collections.defaultdict(list))  # warm-up: watch, discovery
        bare_job(backend, requests)
        for i in range(args.repeats):
            order = ("kinetic", "bare") if i % 2 == 0 else ("bare", "kinetic")
            for which in order:
                time.sleep(args.settle)
                with requests.trip(trips[which]):
                    if which == "kinetic":
                        times[which].append(kinetic_trip(target, marks))
                    else:
                        times[which].append(bare_job(backend, requests))
        print(f"load average: {load_avg()}")
        k, b = statistics.median(times["kinetic"]), statistics.median(times["bare"])
        kreq, kdetail = per_trip(trips["kinetic"])
        breq, bdetail = per_trip(trips["bare"])
        print(f"\nround trip, median of {args.repeats} (order rotating):")
        print(f"  kinetic submit -> result() + cleanup: {k * 1000:7.1f} ms")
        print(f"  bare Job create -> Complete:          {b * 1000:7.1f} ms")
        ratio = k / b
        met = "met" if ratio <= GOAL_RATIO else "NOT met"
        print(
            f"  ratio kinetic / bare:                 {ratio:7.2f}x (goal <= {GOAL_RATIO}x: {met})"
        )
        print("\nAPI requests per trip (this process's clients):")
        print(f"  kinetic: {kreq:.1f} ({kdetail})")
        print(f"  bare:    {breq:.1f} ({bdetail})")
        met = "met" if kreq <= GOAL_REQUESTS else "NOT met"
        print(f"  goal <= {GOAL_REQUESTS} per kinetic trip: {met}")
        print(f"  watch streams opened during the run (shared by every job): {requests.watches}")
        print(f"\nwhere a kinetic trip's time goes (median of {len(marks['submit returned'])}):")
        for name, values in marks.items():
            print(f"  {name:36s} {statistics.median(values) * 1000:7.1f} ms")
        bare_py, runner_py = import_cost(9)
        print("\ninterpreter start here (median of 9):")
        print(f"  python -c pass:                        {bare_py * 1000:7.1f} ms")
        print(f"  python -c 'import kinetic_core.runner': {runner_py * 1000:7.1f} ms")
        print(f"  the runner's import above a bare start: {(runner_py - bare_py) * 1000:7.1f} ms")
        print(f"load average: {load_avg()}")
    finally:
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    main()
