"""One WATCH per (cluster, namespace, kind) per process: the cache ``poll`` answers from.

Why: a LIST per poll interval per process multiplies with every process that waits
(triggerers, dashboards, workers), and a change is seen only at the next poll. Here each
kind kinetic reads (Jobs and Pods labelled ``app=kinetic``; JobSets once a poll asks for
them) is watched once per process by a daemon thread, shared by every backend instance
and waiter of that namespace; each event updates an in-memory cache and wakes the
waiters whose jobs it touches (``NamespaceWatch.wait``, behind ``sleep_until_change``).
On by default; ``KINETIC_K8S_WATCH=0`` switches it off (every poll LISTs).

The bookkeeping of a reflector: a LIST (paged) gives the objects and a resourceVersion,
the WATCH resumes from it (bookmarks keep it fresh); ``410 Gone`` (the server no longer
holds that version) relists; a dropped connection reconnects from the last version
with the one backoff of ``kinetic_core.util.retrying``; a relist every ``RELIST_EVERY`` is the
safety net. A kind's cache is used only while its watch is connected and synced,
otherwise ``poll`` LISTs as before; a watch refused by RBAC (no ``watch`` verb) or
switched off leaves LIST in charge (a refusal with one warning). A watch nobody polled
or slept on for ``IDLE_AFTER`` stops; the next poll starts it again.

The cache holds the same objects a label-selected LIST returns (ordered by name, as
the server lists them), so the states computed from them are the same functions of the
same inputs. A job this process just wrote (launch, cancel) is read
from a cache only once that cache stands at the write's resourceVersion (its own event has
arrived: a poll first waits for it, up to ``TORN_WAIT``, since it comes within
milliseconds); a write whose version is unknown makes its polls LIST for
``FRESH_AFTER_WRITE`` seconds. (Before issue 37 every poll LISTed for those 2 s: 20-24
LISTs per round trip.)

One instant per job. A job's state combines kinds (its Job and its pods; a JobSet) whose
events arrive on separate streams, so the caches can stand at different points of the
server's history: the Job watch has seen the Job fail while the pods cache has not yet
seen its pod (a failed Job without a pod reads Preempted), or the reverse. So each cache
knows where it is (``KindWatch.at``: the resourceVersion of the last event, bookmark or
relist it applied) and, per job, since when what it holds of the job is true (the
resourceVersion of the job's last change there, or of the relist): ``Held``. A job is
answered from the caches only at an instant where every kind it needs holds (``instant``);
a job with none (its kinds "torn") first waits up to ``TORN_WAIT`` for the lagging caches to
reach the newest one (``catch_up``: while jobs end, the other stream's next event or a
bookmark comes soon; ``Backend.poll`` takes no deadline, so this bound is the whole cost of
the wait), unless its Job counts exactly the pods the pods cache holds (``counts_agree``:
then the pair is one the server shows, whatever the streams' positions); one still torn is
read by LIST at the newest cache's resourceVersion
(``resourceVersionMatch=Exact``) for the kinds behind it, so every answer is what one
LIST at one instant would give. Where such a LIST shows what a lagging cache holds, the
cache is ``confirm``-ed at that instant: the next poll answers from it, and a quiet stream
(one whose bookmarks carry an old version: the server's watch cache of that resource saw
nothing newer) costs one small LIST per change of a job, not one per poll.

This compares resourceVersions of different kinds as integers, which the Kubernetes API
calls opaque: every kube-apiserver so far (1.20, the test cluster, through today's) sets
them to the etcd revision of the write, one counter for every kind stored in one etcd, so
"newer than" holds across Jobs, Pods and JobSets unless a server stores them in separate
etcds (``--etcd-servers-overrides``; providers split off at most Events). A cache whose
resourceVersion is no integer is never used: such a server is polled by LIST.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kinetic_core.backends.kubernetes.client import KubeApiError, KubeClient
from kinetic_core.errors import ConfigError, PermissionDenied
from kinetic_core.util.retrying import reconnect_retry

log = logging.getLogger(__name__)

#: ``KINETIC_K8S_WATCH=0`` switches the watch off: every poll LISTs.
ENV_SWITCH = "KINETIC_K8S_WATCH"
SELECTOR = "app=kinetic"
JOB_LABEL = "kinetic/job-id"
WATCH_SECONDS = 60  # the server ends each watch request after this: idle/relist checked then
RELIST_EVERY = 300.0  # the safety net: a full relist this often, whatever the events said
IDLE_AFTER = 120.0  # no poll of the namespace for this long: its watches stop
FRESH_AFTER_WRITE = 2.0  # a write's own events are waited for this long at most
#: A poll that finds jobs torn first waits up to this long (seconds) for the lagging caches
#: to reach the newest one (``NamespaceWatch.catch_up``); only the jobs still torn then are
#: read by LIST. Each completion writes its pod, then its Job: while completions come in,
#: the other stream's next event (or a bookmark) arrives well within this.
TORN_WAIT = 0.2
LIST_PAGE = 500


def reconnects_after(exc: BaseException) -> bool:
    """What a watch reconnects after: anything but a refusal (RBAC, credentials, TLS) or
    an HTTP error the server will repeat (404: the kind is not served)."""
    if isinstance(exc, PermissionDenied | ConfigError):
        return False
    if isinstance(exc, KubeApiError):
        return exc.transient
    return True


def enabled() -> bool:
    """Whether watching is on: yes unless ``KINETIC_K8S_WATCH`` is ``0`` (``false``, ``no``,
    ``off``), read at every poll. A poll reads each job at one instant of the server across
    the Job and Pod (and JobSet) streams (see the module docstring), as a LIST does."""
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def revision(rv: Any) -> int | None:
    """A resourceVersion as the etcd revision it is (None when it is not an integer)."""
    try:
        return int(str(rv))
    except ValueError:
        return None


@dataclass(frozen=True)
class Held:
    """What one kind's cache holds of one job, and when that was the server's truth: from
    ``since`` (the job's last change there, or the cache's relist) up to ``until`` (where
    the cache stands), and at ``confirmed`` (a LIST at that resourceVersion showed it)."""

    objects: tuple[dict[str, Any], ...]
    since: int
    until: int
    confirmed: int | None = None

    def holds_at(self, rv: int) -> bool:
        return self.since <= rv and (rv <= self.until or rv == self.confirmed)


def instant(held: Sequence[Held]) -> int | None:
    """The latest resourceVersion at which every one of ``held`` (a job's kinds) holds:
    what they say together is what a LIST at that instant says. None: they are torn."""
    candidates = {min(h.until for h in held)} | {h.confirmed for h in held if h.confirmed}
    return max((rv for rv in candidates if all(h.holds_at(rv) for h in held)), default=None)


def counts_agree(job: Held, pods: Held) -> bool:
    """Whether a plain Job, as its cache holds it, counts exactly the pods the pods cache
    holds of it (active: neither ended nor being deleted; succeeded; failed), as the Job
    controller counts them. Such a pair is what the server shows at some instant whatever
    the streams' positions: the Job controller writes the Job when a count changes, so a
    stream behind the other has nothing of this job on its way that changes the answer.
    A torn job whose caches agree is answered from them: no ``TORN_WAIT``, no LIST (in a
    wave of job ends most torn jobs were such pairs, each waiting 200 ms: issue 37). Only
    a pair that disagrees (the Job failed while its failed pod is not in the pods cache:
    read alone, that reads Preempted) is waited for and read at one instant."""
    if len(job.objects) != 1:
        return False
    status = job.objects[0].get("status") or {}
    phases = [(p.get("status") or {}).get("phase") for p in pods.objects]
    active = sum(
        1
        for p, phase in zip(pods.objects, phases, strict=True)
        if phase not in ("Succeeded", "Failed") and not p["metadata"].get("deletionTimestamp")
    )
    counted = (status.get("active") or 0, status.get("succeeded") or 0, status.get("failed") or 0)
    return counted == (active, phases.count("Succeeded"), phases.count("Failed"))


@dataclass(frozen=True)
class Write:
    """One write of a job by this process: when (monotonic), at which resourceVersion
    (None: unknown) and which kinds it wrote."""

    at: float
    rv: int | None
    kinds: frozenset[str]

    def hides(self, kind: str, cache_at: int) -> bool:
        """Whether a ``kind`` cache standing at ``cache_at`` may not show this write yet."""
        return self.rv is None or (kind in self.kinds and cache_at < self.rv)


@dataclass(frozen=True)
class KindView:
    """One kind's cache as a poll sees it: where it stands (``at``) and what it holds of
    each job asked for."""

    kind: str
    at: int
    jobs: dict[str, Held]


class KindWatch:
    """The watch of one kind (``jobs``, ``pods``, ``jobsets``) and its cache by name."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.objects: dict[str, dict[str, Any]] = {}
        self.rv: str | None = None  # where the next watch resumes; None: relist first
        self.synced = False
        self.disabled: str | None = None  # why this process LISTs this kind for good
        self.thread: threading.Thread | None = None
        self.response: Any = None  # the open watch response (closing it ends the stream)
        self.listed_at = 0.0
        # Where the cache stands in the server's history (resourceVersions as revisions):
        self.at: int | None = None  # the last event, bookmark or relist applied
        self.since = 0  # the last relist: what the cache holds is known true from there
        self.changed: dict[str, int] = {}  # job id -> its last change here since the relist
        self.confirmed: dict[str, int] = {}  # job id -> a LIST at this rv showed what we hold
        # What it cost and did: the tests and bench/k8s_watch.py read these.
        self.lists = self.watches = self.gone = self.failures = 0
        self.torn = self.confirms = 0  # jobs of this kind read by LIST at an instant; of
        # those, how many the LIST showed as the cache held them (confirmed there)


class NamespaceWatch:
    """The watches of one namespace of one cluster, shared by the whole process."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.cond = threading.Condition()
        self.kinds: dict[str, KindWatch] = {}
        self.seq = 0  # bumped by every change of a cached object
        self.changed: dict[str, int] = {}  # job id -> seq of its last change
        # job id -> this process's last write of it: when, at which resourceVersion (None:
        # unknown), and the kinds it wrote.
        self.written: dict[str, Write] = {}
        self.used = time.monotonic()
        self.wakeups = 0  # sleeps a watch event cut short
        self.catch_ups = self.caught_up = 0  # polls that waited for lagging caches; of
        # those, how many saw them get there (``catch_up``)
        self.sleeping = 0  # threads in ``wait`` now: the watch is in use
        self.stopped = False  # ``stop``: for good (the registry forgot it)
        self.listeners: set[Callable[[str], None]] = set()  # told each changed job id
        self._read = threading.local()  # per waiting thread: seq at its last poll

    # ---- what the backend asks ------------------------------------------------------------
    def mark_read(self) -> None:
        """Called at the start of a poll: a change after this wakes this thread's sleep."""
        with self.cond:
            self._read.seq = self.seq

    def listen(self, listeners: Iterable[Callable[[str], None]]) -> None:
        """Tell ``listeners`` the id of each job an event changes (the shared poller's wake:
        called on the watch thread, so they must only schedule work)."""
        with self.cond:
            self.listeners.update(listeners)

    def wrote(self, job_id: str, rv: int | None = None, kinds: Iterable[str] = ()) -> None:
        """This process wrote the job's ``kinds`` at ``rv``: their caches answer for it once
        they stand there; an unknown ``rv``: it is read from the server for a moment."""
        with self.cond:
            self.written[job_id] = Write(time.monotonic(), rv, frozenset(kinds))

    def unseen_writes(self, ids: Iterable[str]) -> dict[str, int]:
        """The kinds whose cache has not reached this process's recent writes of ``ids``
        yet: kind -> the newest such write's resourceVersion."""
        now = time.monotonic()
        behind: dict[str, int] = {}
        with self.cond:
            for job in ids:
                write = self.written.get(job)
                if write is None or write.rv is None or now - write.at >= FRESH_AFTER_WRITE:
                    continue
                for kind in write.kinds:
                    cache = self.kinds.get(kind)
                    if cache is not None and cache.at is not None and cache.at < write.rv:
                        behind[kind] = max(behind.get(kind, 0), write.rv)
        return behind

    def view(self, kind: str, ids: Iterable[str]) -> KindView | None:
        """What the ``kind`` cache holds of ``ids`` and since when (``Held``), or None when
        it cannot answer (not synced yet, refused, a job just written, a resourceVersion
        that is no integer): LIST then. Starts the kind's watch on first use."""
        wanted = set(ids)
        now = time.monotonic()
        with self.cond:
            self.used = now
            watch = self._started(kind)
            if not watch.synced or watch.disabled or watch.at is None:
                return None
            self.written = {j: w for j, w in self.written.items() if now - w.at < FRESH_AFTER_WRITE}
            if any(self.written[j].hides(kind, watch.at) for j in wanted & self.written.keys()):
                return None
            found: dict[str, list[dict[str, Any]]] = {j: [] for j in wanted}
            for obj in watch.objects.values():
                job = job_of(obj)
                if job in found:
                    found[job].append(obj)
            held = {
                job: Held(
                    tuple(sorted(objs, key=lambda o: str(o["metadata"]["name"]))),
                    since=max(watch.changed.get(job, 0), watch.since),
                    until=watch.at,
                    confirmed=watch.confirmed.get(job),
                )
                for job, objs in found.items()
            }
            return KindView(kind, watch.at, held)

    def confirm(self, view: KindView, rv: int, listed: dict[str, list[dict[str, Any]]]) -> None:
        """A LIST at ``rv`` showed ``listed`` (by job id) of ``view``'s kind: where that is
        what the cache held in ``view`` (and it has not changed since), the cache holds at
        ``rv`` too, and reads of the job answer from it at that instant."""
        with self.cond:
            watch = self.kinds.get(view.kind)
            if watch is None:
                return
            watch.torn += len(listed)
            for job, objects in listed.items():
                held = view.jobs.get(job)
                if held is None or watch.since > held.until:
                    continue  # relisted since the view: what it held may be gone
                if watch.changed.get(job, 0) > held.until:
                    continue  # changed since the view
                if sorted(map(_identity, objects)) == sorted(map(_identity, held.objects)):
                    watch.confirmed[job] = rv
                    watch.confirms += 1

    def catch_up(self, kinds: Iterable[str], rv: int, timeout: float) -> bool:
        """Wait up to ``timeout`` until every one of ``kinds``' caches stands at ``rv`` or
        later (an event or a bookmark of its stream got there): True when they do; False
        at the timeout, or at once when one of them cannot answer (not synced, refused)."""
        wanted = list(kinds)

        def settled() -> bool | None:
            """True: all there; False: one cannot answer; None: keep waiting."""
            for kind in wanted:
                watch = self.kinds.get(kind)
                if watch is None or not watch.synced or watch.disabled or watch.at is None:
                    return False
                if watch.at < rv:
                    return None
            return True

        with self.cond:
            self.sleeping += 1  # in use: no idle stop meanwhile
            try:
                self.cond.wait_for(lambda: settled() is not None, max(0.0, timeout))
                there = settled() is True
                self.catch_ups += 1
                self.caught_up += there
                return there
            finally:
                self.sleeping -= 1
                self.used = time.monotonic()

    def synced(self, kinds: Iterable[str] = ("jobs", "pods")) -> bool:
        with self.cond:
            return all(
                (w := self.kinds.get(k)) is not None and w.synced and not w.disabled for k in kinds
            )

    def wait(self, job_ids: list[str], timeout: float) -> bool:
        """Sleep until an event changes one of ``job_ids`` (True) or ``timeout`` (False).
        A plain sleep while the cache is not synced (the next poll LISTs anyway)."""
        if not self.synced():
            time.sleep(timeout)
            return False
        wanted = set(job_ids)
        with self.cond:
            since = getattr(self._read, "seq", self.seq)
            self.sleeping += 1
            try:
                woke = self.cond.wait_for(
                    lambda: any(self.changed.get(j, 0) > since for j in wanted), timeout
                )
            finally:
                self.sleeping -= 1
                self.used = time.monotonic()
            if woke:
                self.wakeups += 1
            return bool(woke)

    def stop(self) -> None:
        """Stop every watch of the namespace (their threads end; the cache is dropped)."""
        with self.cond:
            self.stopped = True
            for watch in self.kinds.values():
                _close(watch.response)

    # ---- the watch thread -----------------------------------------------------------------
    def _started(self, kind: str) -> KindWatch:
        """The kind's watch, its thread (re)started if it is not running (under cond)."""
        watch = self.kinds.setdefault(kind, KindWatch(kind))
        if watch.disabled is None and (watch.thread is None or not watch.thread.is_alive()):
            watch.synced, watch.rv = False, None  # a stopped watch's cache is stale
            watch.thread = threading.Thread(
                target=self._run,
                args=(watch,),
                name=f"kinetic-watch-{self.client.namespace}-{kind}",
                daemon=True,
            )
            watch.thread.start()
        return watch

    def _idle(self) -> bool:
        if self.stopped or not enabled():
            return True
        return not self.sleeping and time.monotonic() - self.used > IDLE_AFTER

    def _run(self, watch: KindWatch) -> None:
        """Sessions (relist if due, then one watch request) until idle; transient errors
        back off and reconnect; a permanent one leaves the kind to LIST."""
        try:
            while not self._idle():
                policy = reconnect_retry(reconnects_after, self._idle)
                try:
                    policy(self._session, watch)
                except Exception as exc:
                    if self._idle():
                        return
                    self._disable(watch, exc)
                    return
        finally:
            with self.cond:
                watch.synced, watch.response = False, None
                if watch.disabled is None:
                    watch.objects.clear()

    def _disable(self, watch: KindWatch, exc: Exception) -> None:
        """A watch the server refuses for good: this process LISTs the kind from now on."""
        with self.cond:
            watch.disabled = str(exc)
        hint = (
            " (grant the `watch` verb in the Role to save the LISTs: docs/kubernetes.md)"
            if isinstance(exc, PermissionDenied)
            else ""
        )
        log.warning(
            "kinetic: cannot watch %s in namespace %s, polling with LIST instead%s: %s",
            watch.kind,
            self.client.namespace,
            hint,
            exc,
        )

    def _session(self, watch: KindWatch) -> None:
        """Relist when needed, then stream one watch request's events into the cache.
        Returns when the server ends the stream (or on 410: relist next); raises on a
        dropped connection (the policy backs off and calls again)."""
        try:
            due = time.monotonic() - watch.listed_at > RELIST_EVERY
            if watch.rv is None or due:
                self._relist(watch)
            rv = watch.rv
            left = RELIST_EVERY - (time.monotonic() - watch.listed_at)
            query = {
                "labelSelector": SELECTOR,
                "resourceVersion": rv,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": str(max(1, min(WATCH_SECONDS, int(left)))),
            }
            events = self.client.watch(
                self.client.ns(watch.kind),
                query,
                read_timeout=WATCH_SECONDS + 30,
                opened=lambda response: self._opened(watch, response),
            )
            for event in events:
                if not self._event(watch, event):
                    return
        except KubeApiError as exc:
            if exc.status != 410:
                self._lost(watch)
                raise
            self._gone(watch)
        except BaseException:
            self._lost(watch)
            raise

    def _opened(self, watch: KindWatch, response: Any) -> None:
        with self.cond:
            watch.watches += 1
            watch.response = response
            watch.synced = watch.rv is not None

    def _lost(self, watch: KindWatch) -> None:
        with self.cond:
            watch.failures += 1
            watch.synced, watch.response = False, None
            self.cond.notify_all()  # a ``catch_up`` on it ends

    def _gone(self, watch: KindWatch) -> None:
        """410 Gone: the server no longer has our version; the cache stays until the
        relist replaces it (the next session does it first)."""
        with self.cond:
            watch.gone += 1
            watch.rv = None
            watch.synced = False
            self.cond.notify_all()  # a ``catch_up`` on it ends

    def _event(self, watch: KindWatch, event: dict[str, Any]) -> bool:
        """Apply one event; False when the stream must end (410 Gone: relist)."""
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                self._gone(watch)
                return False
            raise KubeApiError(int(obj.get("code") or 500), str(obj.get("message")), "watch")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        with self.cond:
            if kind != "BOOKMARK":
                name = obj["metadata"]["name"]
                old = watch.objects.pop(name, None)
                if kind != "DELETED":
                    watch.objects[name] = obj
                self._touch(old, obj)
                self._mark(watch, revision(rv), old, obj)
            if rv:
                watch.rv = rv
                watch.at = revision(rv)
                self.cond.notify_all()  # a bookmark moves ``at`` too: ``catch_up`` waits on it
        return not self._idle()

    def _mark(self, watch: KindWatch, rv: int | None, *objects: dict[str, Any] | None) -> None:
        """Note the resourceVersion at which the jobs of ``objects`` last changed in this
        kind (a DELETED event's object carries the deletion's version) (under cond)."""
        for obj in objects:
            job = None if obj is None else job_of(obj)
            if job and rv is not None:
                watch.changed[job] = max(watch.changed.get(job, 0), rv)

    def _touch(self, *objects: dict[str, Any] | None) -> None:
        """Note a change of the jobs of ``objects`` and wake their waiters (under cond)."""
        self.seq += 1
        for obj in objects:
            if obj is not None:
                job = job_of(obj)
                if job:
                    self.changed[job] = self.seq
                    for listener in self.listeners:
                        listener(job)
        self.cond.notify_all()

    def _relist(self, watch: KindWatch) -> None:
        """A paged LIST of the kind; replaces the cache, waking the jobs that differ."""
        items: dict[str, dict[str, Any]] = {}
        token: str | None = None
        rv = ""
        while True:
            query = {"labelSelector": SELECTOR, "limit": LIST_PAGE, "continue": token}
            page = self.client.call("GET", self.client.ns(watch.kind), query=query)
            for item in page.get("items") or []:
                items[item["metadata"]["name"]] = item
            token = (page.get("metadata") or {}).get("continue") or None
            rv = (page.get("metadata") or {}).get("resourceVersion") or rv
            with self.cond:
                watch.lists += 1
            if token is None:
                break
        with self.cond:
            for name in watch.objects.keys() | items.keys():
                old, new = watch.objects.get(name), items.get(name)
                if _version(old) != _version(new):
                    self._touch(old, new)
            watch.objects = items
            watch.rv = rv
            watch.at = revision(rv)
            # What the watch missed before this LIST is unknown: every job's objects here
            # are known true from the LIST's version on (older change marks say nothing).
            watch.since = watch.at or 0
            watch.changed, watch.confirmed = {}, {}
            watch.listed_at = time.monotonic()
            self._forget_gone_jobs()

    def _forget_gone_jobs(self) -> None:
        """Drop the change marks of jobs no cache holds any more (their last change, the
        deletion, woke their waiters already): memory stays bounded (under cond)."""
        present = {job_of(o) for w in self.kinds.values() for o in w.objects.values()}
        self.changed = {j: s for j, s in self.changed.items() if j in present}


def job_of(obj: dict[str, Any]) -> str | None:
    """The kinetic job an object is labelled with (``kinetic/job-id``); None: no job's."""
    labels: dict[str, str] = obj["metadata"].get("labels") or {}
    return labels.get(JOB_LABEL)


def _version(obj: dict[str, Any] | None) -> str | None:
    return None if obj is None else str(obj["metadata"].get("resourceVersion"))


def _identity(obj: dict[str, Any]) -> tuple[str, str]:
    """An object at one version: its name and resourceVersion (any write changes it)."""
    return str(obj["metadata"]["name"]), str(obj["metadata"].get("resourceVersion"))


def _close(response: Any) -> None:
    """End a streaming response from another thread (its reader sees the stream end)."""
    if response is None:
        return
    with contextlib.suppress(Exception):
        if hasattr(response, "shutdown"):
            response.shutdown()
        response.close()


_registry: dict[tuple[object, ...], NamespaceWatch] = {}
_lock = threading.Lock()
_pid: int | None = None


def _connection(client: KubeClient) -> tuple[object, ...]:
    """Who reads where: the server, a digest of the credentials, the namespace. (Not the
    kubeconfig as given: a submitter's content and a waiter's reference to it are one.)"""
    cfg = client.api.configuration
    who = repr((sorted((cfg.api_key or {}).items()), cfg.cert_file, cfg.username))
    return (cfg.host, hashlib.sha256(who.encode()).hexdigest(), client.namespace)


def namespace_watch(client: KubeClient, *, create: bool = True) -> NamespaceWatch | None:
    """The process's watch of ``client``'s cluster and namespace (None when switched off;
    without ``create``, None unless a poll made it, so nothing loads credentials). Keyed
    by the connection, not the client: every backend of that namespace shares it. A
    forked child starts its own (threads do not survive a fork)."""
    global _pid
    if not enabled() or not (create or client.loaded):
        return None
    key = _connection(client)
    with _lock:
        if _pid != os.getpid():
            _registry.clear()
            _pid = os.getpid()
        if key not in _registry and create:
            _registry[key] = NamespaceWatch(client)
        return _registry.get(key)


def watches() -> list[NamespaceWatch]:
    """Every namespace watch of this process (what the tests and the bench count)."""
    with _lock:
        return list(_registry.values()) if _pid == os.getpid() else []


def stop_all() -> None:
    """Stop and forget every watch of the process (tests, the bench between phases)."""
    with _lock:
        found = list(_registry.values())
        _registry.clear()
    for watch in found:
        watch.stop()


__all__ = [
    "ENV_SWITCH",
    "TORN_WAIT",
    "Held",
    "KindView",
    "KindWatch",
    "NamespaceWatch",
    "Write",
    "counts_agree",
    "enabled",
    "instant",
    "job_of",
    "namespace_watch",
    "revision",
    "stop_all",
    "watches",
]
