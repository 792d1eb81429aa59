"""Watch-based status (``backends/kubernetes/watch.py``) against the real API server.

Each test starts from no watch in the process (``stop_all``), so its counts are its own.
What is asserted is what the watch did (why a sleep ended, how many watch requests the
API server audited, 410s seen), never how long something took.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import sys
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import kinetic_core as kc
from kinetic_core.backends import get_backend
from kinetic_core.backends.kubernetes import KubernetesBackend
from kinetic_core.backends.kubernetes import watch as kube_watch
from kinetic_core.backends.kubernetes.client import USER_AGENT
from kinetic_core.backends.kubernetes.states import job_state
from kinetic_core.control import polling
from kinetic_core.control.polling import poll_ticks

sys.path.insert(0, str(Path(__file__).resolve().parent))

import k8s_fns
from cluster.cluster import KINETIC_RULES, TestCluster
from test_backend import _list, _patch_status
from test_reliability import NOWHERE, RUNNING_POD, _pod_of, _until


@pytest.fixture(autouse=True)
def fresh_watches(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(kube_watch.ENV_SWITCH, raising=False)  # on by default
    kube_watch.stop_all()
    yield
    kube_watch.stop_all()


def _backend(target: kc.Target) -> KubernetesBackend:
    backend = get_backend(target.resolve())
    assert isinstance(backend, KubernetesBackend)
    return backend


def _synced_watch(backend: KubernetesBackend) -> kube_watch.NamespaceWatch:
    """Poll until the namespace's Job and Pod watches are synced; the watch."""
    for _ in poll_ticks(interval=0.2, timeout=60, describe=lambda: "the watch to sync"):
        backend.poll(["no-such-job"])
        watch = kube_watch.namespace_watch(backend.client)
        assert watch is not None
        if watch.synced():
            return watch
    raise AssertionError("unreachable")


def _move_etcd_on(cluster: TestCluster) -> None:
    """Two writes to etcd outside the API server's keys: its revision moves on, as other
    writers move it while an API server is down."""
    argv = cluster._argv["kube-apiserver"]
    etcd = next(a.split("=", 1)[1] for a in argv if a.startswith("--etcd-servers="))
    key = base64.b64encode(b"kinetic-test/revision").decode()
    for verb, body in (("put", {"key": key, "value": "MQ=="}), ("deleterange", {"key": key})):
        request = urllib.request.Request(
            f"{etcd}/v3/kv/{verb}", data=json.dumps(body).encode(), method="POST"
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert "revision" in json.loads(answer.read())["header"]


def _watch_requests(cluster: TestCluster, resource: str) -> int:
    return cluster.count_requests("watch", resource, USER_AGENT)


@pytest.mark.timeout(240)
def test_a_sleeping_waiter_is_woken_by_the_watch_event(kube: kc.Target) -> None:
    """poll_interval 60 s, and every sleep of 60 s ends because an event of the job
    arrived (``wakeups`` grows by one per sleep) until the job reads SUCCEEDED."""
    target = replace(kube, poll_interval=60)
    backend = _backend(target)
    watch = _synced_watch(backend)
    job = kc.submit(k8s_fns.sleep, (2,), target=target)
    sleeps = 0
    while not job.state().terminal:
        before = watch.wakeups
        backend.poll([job.job_id])  # what a wait does before it sleeps
        backend.sleep_until_change([job.job_id], 60)
        sleeps += 1
        assert watch.wakeups == before + 1, "a sleep ended by its timeout, not by an event"
    assert job.state().status is kc.JobStatus.SUCCEEDED
    assert sleeps >= 1
    assert backend.poll([job.job_id])[job.job_id].phase == "exited"


@pytest.mark.timeout(300)
def test_after_an_api_server_restart_the_watch_reconnects_relists_on_410_and_goes_on(
    k8s_cluster: TestCluster, kube: kc.Target
) -> None:
    """The API server is killed and started again (as when GKE upgrades the control
    plane): the watch loses its connection and backs off until the server is back. etcd
    moves on meanwhile (as it does under other writers), so the new server's watch cache
    starts past our version and resuming from it is answered 410 Gone (expired): the
    watch relists, and a job submitted afterwards is observed through it (a sleeping wait
    woken by its events)."""
    backend = _backend(kube)
    watch = _synced_watch(backend)
    jobs = watch.kinds["jobs"]
    watches_before, lists_before = jobs.watches, jobs.lists
    with k8s_cluster.control_plane_outage():
        for _ in poll_ticks(interval=0.2, timeout=30, describe=lambda: "the watch to drop"):
            if not watch.synced():
                break
        _move_etcd_on(k8s_cluster)
    assert jobs.failures >= 1, "the watch did not notice the dropped connection"
    _synced_watch(backend)
    assert jobs.watches > watches_before
    assert jobs.gone >= 1, "the restarted server did not answer 410 Gone to the old version"
    assert jobs.lists > lists_before, "no relist after 410 Gone"
    job = kc.submit(k8s_fns.sleep, (1,), target=replace(kube, poll_interval=60))
    woken = watch.wakeups
    assert job.wait(timeout=180).status is kc.JobStatus.SUCCEEDED
    assert watch.wakeups > woken, "no wait was woken by an event after the reconnect"


@pytest.mark.timeout(240)
def test_without_the_watch_verb_polls_fall_back_to_list_with_one_warning(
    k8s_cluster: TestCluster, kube: kc.Target, caplog: pytest.LogCaptureFixture
) -> None:
    rules = [{**r, "verbs": [v for v in r["verbs"] if v != "watch"]} for r in KINETIC_RULES]
    content = k8s_cluster.service_account_kubeconfig("kinetic-no-watch", rules)
    target = replace(kube, kubeconfig=content)
    with caplog.at_level(logging.WARNING, logger=kube_watch.__name__):
        job = kc.submit(k8s_fns.square, (5,), target=target)
        assert job.wait(timeout=120).status is kc.JobStatus.SUCCEEDED
        backend = _backend(target)
        for _ in poll_ticks(interval=0.2, timeout=60, describe=lambda: "the pod to exit"):
            if backend.poll([job.job_id])[job.job_id].phase == "exited":
                break
        watch = kube_watch.namespace_watch(backend.client)
        assert watch is not None
        for _ in poll_ticks(interval=0.2, timeout=60, describe=lambda: "the refusals"):
            backend.poll([job.job_id])
            if all(watch.kinds[k].disabled for k in ("jobs", "pods")):
                break
        for _ in poll_ticks(interval=0.2, timeout=60, describe=lambda: "the pod to exit"):
            if backend.poll([job.job_id])[job.job_id].phase == "exited":  # by LIST
                break
    assert len(kube_watch.watches()) == 1, "the submitter and the waiter watch apart"
    for kind in ("jobs", "pods"):
        assert watch.kinds[kind].watches == 0
    warned = [r for r in caplog.records if "cannot watch" in r.getMessage()]
    kinds = [r.getMessage().split()[3] for r in warned]
    assert {"jobs", "pods"} <= set(kinds) and len(kinds) == len(set(kinds)), kinds
    assert all("watch" in r.getMessage() and "Role" in r.getMessage() for r in warned)


@pytest.mark.timeout(240)
def test_many_waiters_in_one_process_share_one_watch(
    k8s_cluster: TestCluster, kube: kc.Target
) -> None:
    """Six threads wait (two per job) through two backend instances of one namespace:
    every watch request the API server saw came from the one shared watch per kind."""
    before = {k: _watch_requests(k8s_cluster, k) for k in ("jobs", "pods")}
    other = replace(kube, lost_grace=301.0)  # another backend instance, same namespace
    assert _backend(kube) is not _backend(other)
    jobs = [kc.submit(k8s_fns.square, (i,), target=kube) for i in range(3)]
    results: list[Any] = []

    def wait(job: kc.JobHandle, target: kc.Target) -> None:
        # cleanup=False: two waiters of one job; whichever cleaned up first would leave the
        # other nothing to read (ResultNotAvailable, as documented)
        results.append(kc.attach(job.job_id, target=target).result(timeout=180, cleanup=False))

    threads = [threading.Thread(target=wait, args=(job, t)) for job in jobs for t in (kube, other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 6
    assert len(kube_watch.watches()) == 1
    watch = kube_watch.watches()[0]
    alive = {t.name for t in threading.enumerate() if t.name.startswith("kinetic-watch-")}
    # (a stopped watch's thread may still be ending its last request: only ours must run)
    assert {"kinetic-watch-default-jobs", "kinetic-watch-default-pods"} <= alive
    assert sorted(watch.kinds) == ["jobs", "pods"]
    made = {kind: watch.kinds[kind].watches for kind in ("jobs", "pods")}
    kube_watch.stop_all()  # the server audits a watch request once it ends
    for kind in ("jobs", "pods"):
        assert made[kind] >= 1
        for _ in poll_ticks(interval=0.2, timeout=30, describe=lambda: "the audit log"):
            seen = _watch_requests(k8s_cluster, kind) - before[kind]
            if seen >= made[kind]:
                break
        assert seen == made[kind], f"{kind}: {seen} watches audited, the shared one made {made}"
        assert seen <= 3, f"{seen} watch requests of {kind} for one shared watch"


@pytest.mark.timeout(240)
def test_the_shared_poller_polls_a_job_when_the_watch_sees_it_change(
    kube: kc.Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The async shared poller's schedule: one quick first poll, then an hour between
    polls. The job still ends for its waiter: each watch event of it makes the poller
    poll that job at once (``on_change``). Without the wake this hangs until the test's
    timeout."""
    backend = _backend(kube)
    _synced_watch(backend)
    monkeypatch.setattr(polling, "delays", lambda interval, first=0.0: iter([0.0, *[3600.0] * 99]))
    job = kc.submit(k8s_fns.sleep, (2,), target=kube)
    poller = polling.shared_poller()
    polls = poller.polls
    state = asyncio.run(job.await_(timeout=200))
    assert state.status is kc.JobStatus.SUCCEEDED
    assert poller.polls - polls >= 2, "the job ended without a poll the watch caused"


def _ended_pod(phase: str, exit_code: int, reason: str) -> dict[str, Any]:
    """A pod status whose runner container terminated (what a kubelet reports)."""
    terminated = {
        "exitCode": exit_code,
        "reason": reason,
        "startedAt": "2026-01-01T00:00:00Z",
        "finishedAt": "2026-01-01T00:00:05Z",
    }
    runner = {"name": "runner", "image": "x", "imageID": "", "ready": False, "restartCount": 0}
    return {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "False"}],
        "containerStatuses": [{**runner, "state": {"terminated": terminated}}],
    }


OOM_KILLED_POD = _ended_pod("Failed", 137, "OOMKilled")


@contextmanager
def _lagging(monkeypatch: pytest.MonkeyPatch, kind: str) -> Iterator[None]:
    """The ``kind`` watch applies no event inside the block (its thread waits before the
    first one, the rest wait in its stream): that stream lags the others, as one stream
    may lag another on a busy server. Every held event is applied after the block."""
    release = threading.Event()
    apply = kube_watch.NamespaceWatch._event

    def held(self: kube_watch.NamespaceWatch, watch: Any, event: dict[str, Any]) -> bool:
        if watch.kind == kind:
            release.wait()
        return apply(self, watch, event)

    monkeypatch.setattr(kube_watch.NamespaceWatch, "_event", held)
    try:
        yield
    finally:
        release.set()


def _cached(watch: kube_watch.NamespaceWatch, kind: str, job_id: str) -> list[dict[str, Any]]:
    with watch.cond:
        return [
            o
            for o in watch.kinds[kind].objects.values()
            if o["metadata"]["labels"].get(kube_watch.JOB_LABEL) == job_id
        ]


def _failed(job: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Failed" and c.get("status") == "True"
        for c in job.get("status", {}).get("conditions") or []
    )


@pytest.mark.timeout(240)
def test_a_poll_while_the_pod_stream_lags_answers_what_a_list_answers(
    kube: kc.Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Job's and its pods' events arrive on two streams. Here the pods stream lags: the
    Job watch has seen the Job fail (its pod was OOMKilled) while the pods cache has not
    seen the pod at all. A poll answers what a LIST answers (OOMKilled), never the pair
    no LIST can show: a failed Job without a pod reads Preempted (its pod removed with its
    node), a recoverable end that would start a second run of a job that ran out of memory."""
    monkeypatch.setattr(kube_watch, "FRESH_AFTER_WRITE", 0.0)  # the cache, not the write's LIST
    backend = _backend(kube)
    watch = _synced_watch(backend)
    with _lagging(monkeypatch, "pods"):
        job = kc.submit(k8s_fns.square, (3,), target=kube.merge(NOWHERE))
        pod = _pod_of(backend, job.job_id)
        _patch_status(backend, pod["metadata"]["name"], OOM_KILLED_POD)
        _until(
            "the Job watch to see the Job fail",
            lambda: any(_failed(j) for j in _cached(watch, "jobs", job.job_id)),
        )
        assert not _cached(watch, "pods", job.job_id), "the pods stream did not lag"
        torn = watch.kinds["pods"].torn
        polled = backend.poll([job.job_id])[job.job_id]
        assert watch.kinds["pods"].torn == torn + 1, "the pods were not read at the Job's instant"
        jobs = _list(backend, "jobs", job.job_id)
        listed = job_state(jobs[0] if jobs else None, _list(backend, "pods", job.job_id))
    assert (listed.phase, listed.reason, listed.exit_code) == ("exited", "OOMKilled", 137)
    assert (polled.phase, polled.reason, polled.exit_code) == (
        listed.phase,
        listed.reason,
        listed.exit_code,
    )
    job.cancel(wait=0)


@pytest.mark.timeout(240)
def test_a_quiet_stream_whose_job_counts_the_cached_pods_costs_no_list(
    kube: kc.Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pod starts running after its Job's last change, and nothing changes any Job
    afterwards: the Jobs cache never reaches the pod's change. The Job counts the pod
    active either way, so the caches agree (``counts_agree``): every poll answers from
    them, without waiting for the Jobs stream and without a LIST (until issue 37 the
    first poll waited 200 ms and read the Job by LIST at the pod's instant)."""
    monkeypatch.setattr(kube_watch, "FRESH_AFTER_WRITE", 0.0)
    backend = _backend(kube)
    watch = _synced_watch(backend)
    job = kc.submit(k8s_fns.square, (3,), target=kube.merge(NOWHERE))
    pod = _pod_of(backend, job.job_id)
    # The Job's last change (its controller counting the pod active) comes before the pod's:
    # a submit returns right after its creates, maybe before the Job controller's update.
    _until(
        "the Job controller to count the pod",
        lambda: any(j.get("status", {}).get("active") for j in _list(backend, "jobs", job.job_id)),
    )
    _patch_status(backend, pod["metadata"]["name"], RUNNING_POD)
    _until(
        "the pods watch to see the pod run",
        lambda: any(
            p["status"].get("phase") == "Running" for p in _cached(watch, "pods", job.job_id)
        ),
    )

    def from_the_caches() -> bool:
        """One poll reads the job running without reading it by LIST."""
        before = {k: w.torn for k, w in watch.kinds.items()}
        phase = backend.poll([job.job_id])[job.job_id].phase
        return phase == "running" and {k: w.torn for k, w in watch.kinds.items()} == before

    # (the scheduler may still change the pod once: its own condition)
    _until("a poll answered from the caches", from_the_caches)
    waits = watch.catch_ups
    for _ in range(3):
        assert from_the_caches(), "a poll of a job whose caches agree read it by LIST"
    assert watch.kinds["jobs"].torn == 0, "the Job was read by LIST"
    assert watch.catch_ups == waits, "a poll waited for the quiet Jobs stream"
    job.cancel(wait=0)


@pytest.mark.timeout(240)
def test_a_job_no_cache_has_seen_yet_is_not_read_lost(
    kube: kc.Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both streams lag behind a launch: no cache holds anything of the job, which a
    consistent but old instant says too. Status reads "not found" after a recorded launch
    as a deleted job (Lost, for good), so a job no cache holds is LISTed: PENDING."""
    monkeypatch.setattr(kube_watch, "FRESH_AFTER_WRITE", 0.0)
    backend = _backend(kube)
    watch = _synced_watch(backend)
    with _lagging(monkeypatch, "jobs"), _lagging(monkeypatch, "pods"):
        job = kc.submit(k8s_fns.square, (3,), target=kube.merge(NOWHERE))
        assert not _cached(watch, "jobs", job.job_id), "the Jobs stream did not lag"
        state = job.state()
    assert state.status is kc.JobStatus.PENDING, state
    job.cancel(wait=0)


SUCCEEDED_POD = _ended_pod("Succeeded", 0, "Completed")


class _Waiter(threading.Thread):
    """One wait on every id, as ``wait_states`` does (poll, then sleep until a change),
    through its own backend (its own client: its own request count)."""

    def __init__(self, backend: KubernetesBackend, ids: list[str]) -> None:
        super().__init__(daemon=True)
        self.backend, self.ids = backend, ids
        self.states: dict[str, Any] = {}
        self.polled: list[int] = []  # the namespace's change count at the start of each poll
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            watch = kube_watch.namespace_watch(self.backend.client)
            seq = watch.seq if watch is not None else -1
            self.states = self.backend.poll(self.ids)
            self.polled.append(seq)
            self.backend.sleep_until_change(self.ids, 5.0)


@pytest.mark.timeout(300)
def test_a_wave_of_completions_costs_a_few_requests_not_some_per_job(
    kube: kc.Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twelve pods exit one after another, and the Job controller then writes each Job
    (pod, Job, pod finalizer, Job...: events on two streams). Each event wakes a waiter
    whose poll finds the job torn (its pod seen, its Job not yet, or the reverse); the
    poll waits for the lagging stream (``TORN_WAIT``) instead of reading the job by LIST
    at once. The wave costs the waiter a few requests in all, fewer than one per job
    (reading each torn job at once cost about two per job), and every job reads what a
    LIST reads (exited 0)."""
    monkeypatch.setattr(kube_watch, "FRESH_AFTER_WRITE", 0.0)
    n = 12
    handles = [kc.submit(k8s_fns.square, (i,), target=kube.merge(NOWHERE)) for i in range(n)]
    ids = [h.job_id for h in handles]
    writer = _backend(kube)
    pods = [_pod_of(writer, i)["metadata"]["name"] for i in ids]
    backend = KubernetesBackend(kube.resolve())
    watch = _synced_watch(backend)

    def requests() -> int:
        return backend.client.stats.snapshot().requests

    def quiet() -> bool:
        """A poll of every id reads them all from the caches (no request)."""
        before = requests()
        backend.poll(ids)
        return requests() == before

    _until("a poll answered from the caches", quiet)
    waiter = _Waiter(backend, ids)
    before, torn = requests(), sum(k.torn for k in watch.kinds.values())
    waiter.start()
    try:
        for pod in pods:
            _patch_status(writer, pod, SUCCEEDED_POD)

        def done() -> bool:
            """Every Job complete in the cache, and a poll since the last change ended."""
            complete = all(
                any(
                    c.get("type") == "Complete" and c.get("status") == "True"
                    for j in _cached(watch, "jobs", i)
                    for c in j.get("status", {}).get("conditions") or []
                )
                for i in ids
            )
            return complete and len(waiter.polled) >= 2 and waiter.polled[-2] == watch.seq

        _until("the wave to end and the waiter to poll after it", done)
        made = requests() - before
        listed = sum(k.torn for k in watch.kinds.values()) - torn
    finally:
        waiter.stop.set()
    states = waiter.states
    assert all((states[i].phase, states[i].exit_code) == ("exited", 0) for i in ids), states
    for i in ids:
        jobs = _list(writer, "jobs", i)
        listed_state = job_state(jobs[0] if jobs else None, _list(writer, "pods", i))
        assert (listed_state.phase, listed_state.exit_code) == ("exited", 0)
    # Reading each torn job by LIST at once made about two requests per job (23 for 12);
    # waiting for the lagging stream made 4 to 7 here: a LIST only where a stream stayed
    # quiet for TORN_WAIT, batched over every job torn then.
    assert made < n, f"{made} requests for a wave of {n} completions ({listed} jobs LISTed)"
    for h in handles:
        h.cancel(wait=0)
