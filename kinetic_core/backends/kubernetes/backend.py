"""The kubernetes / gke backend: one ``batch/v1`` Job per kinetic job, or one JobSet for a
multi-host or queued job (``jobset.py``, where the server serves JobSet).

``poll`` answers from the process's WATCH of the namespace (``watch.py``: one per cluster,
namespace and kind, shared by every waiter) while it is synced; otherwise (switched off,
refused by RBAC, reconnecting) it makes one LIST of Jobs and one of Pods per namespace,
label-selected by the watched job ids (``kinetic/job-id in (...)``), so its cost follows
the jobs watched, not the finished Jobs kept in the namespace. A node is read only when a pod on it stops being
Ready (to tell a lost node). Manifests come from ``manifest.py``, states from
``states.py``; every request goes through ``client.KubeClient.call`` (retries, error
mapping).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

import kinetic_core.backends.kubernetes.jobset as js
import kinetic_core.backends.kubernetes.watch as kube_watch
from kinetic_core.backends import BackendState, LaunchSpec
from kinetic_core.backends.kubernetes.client import KubeApiError, KubeClient
from kinetic_core.backends.kubernetes.manifest import (
    job_manifest,
    job_name,
    owner_patch,
    secret_manifest,
    valid_labels,
)
from kinetic_core.backends.kubernetes.pod_logs import POD_LINES, JobLog
from kinetic_core.backends.kubernetes.pod_spec import KINETIC_CONTAINER
from kinetic_core.backends.kubernetes.port_forward import port_forward
from kinetic_core.backends.kubernetes.slice_states import jobset_state
from kinetic_core.backends.kubernetes.states import job_state, pod_not_ready
from kinetic_core.backends.kubernetes.watch import (
    KindView,
    NamespaceWatch,
    counts_agree,
    instant,
    job_of,
    namespace_watch,
    revision,
)
from kinetic_core.config.target import DEFAULT_LOST_GRACE, DEFAULT_STORAGE, Target
from kinetic_core.errors import BackendError, ConfigError, PermissionDenied, SubmissionError
from kinetic_core.storage import open_storage
from kinetic_core.util.ports import PortForward, PortSpec

log = logging.getLogger(__name__)

#: The label JobSet puts on each worker's pod: its index (pods of one multi-host job).
WORKER_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
LOG_CHUNK_LINES = POD_LINES  # lines per read_logs chunk from a pod (a public name)

# The tag of a batch driver job (``batch/stager.py``): it reaches the API in-cluster.
DRIVER_TAG = "kinetic/batch-driver"
#: What a batch's driver does with its pod's service account: (API group, resource, verb)
#: it must be allowed, checked up front by a SubjectAccessReview (``check_launch``).
DRIVER_NEEDS = (
    ("batch", "jobs", "create"),
    ("batch", "jobs", "get"),
    ("batch", "jobs", "list"),
    ("", "pods", "list"),
)
# Job ids per label-selected LIST: keeps the request URL well under server limits.
POLL_CHUNK = 400
# The label Kueue puts on a job's Workload: the uid of the job (our JobSet).
WORKLOAD_UID_LABEL = "kueue.x-k8s.io/job-uid"


def _pod_template(manifest: dict[str, Any]) -> dict[str, Any]:
    """The pod template of a Job, or of a JobSet's (one) replicated Job."""
    if manifest["kind"] == "JobSet":
        return dict(manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"])
    return dict(manifest["spec"]["template"])


# A poll's objects: the Jobs, Pods and JobSets of its ids.
_Objects = tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]


def _job_id(obj: dict[str, Any]) -> str:
    return job_of(obj) or ""


def _needed(views: list[KindView], torn: list[str]) -> int:
    """The resourceVersion the lagging caches must reach for the ``torn`` jobs to be held
    at one instant: their newest change in any cache. (Not the newest cache's position:
    in a wave of job ends other jobs' events keep moving that on, and each wait sat out
    the whole ``TORN_WAIT`` although the job's own streams met in ~12 ms: issue 37.)"""
    return max((view.jobs[i].since for view in views for i in torn if i in view.jobs), default=0)


def _reads_secret(job: dict[str, Any], name: str) -> bool:
    """Whether a Job's (or JobSet's) pods read the Secret ``name``: only a job with a
    signing key has one (its runner's ``KINETIC_SIGNING_KEY`` comes from it)."""
    spec = (job.get("spec") or {}).get("template", {}).get("spec") or {}
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    return any(
        ((env.get("valueFrom") or {}).get("secretKeyRef") or {}).get("name") == name
        for container in containers
        for env in container.get("env") or []
    )


def _plain_ids(jobs: Iterable[dict[str, Any]]) -> set[str]:
    """The job ids whose (first) Job in ``jobs`` is a plain Job, not a JobSet's child."""
    first: dict[str, dict[str, Any]] = {}
    for job in jobs:
        first.setdefault(_job_id(job), job)
    return {i for i, j in first.items() if js.JOBSET_NAME not in j["metadata"]["labels"]}


class _NotExact(Exception):
    """The server would not LIST at the resourceVersion asked (compacted, or a server
    without ``resourceVersionMatch``): that poll LISTs instead."""


class _JobAbsent(Exception):
    """The Job create failed and a GET showed that no Job exists: ``error`` is the failure."""

    def __init__(self, error: BackendError) -> None:
        super().__init__(str(error))
        self.error = error


class KubernetesBackend:
    """Backend for any Kubernetes; ``gke`` is this backend with GKE's accelerator labels."""

    #: A job its runner decided reads terminal from storage without a poll: the pod ends
    #: on its own (resolution's ``needs_backend``).
    decided_by_storage = True

    def __init__(self, target: Target) -> None:
        self.name = target.backend or "kubernetes"
        self.client = KubeClient(target)
        self.namespace = self.client.namespace
        self.storage_uri = target.storage or DEFAULT_STORAGE  # where the runner keeps logs
        self.lost_grace = (
            target.lost_grace or DEFAULT_LOST_GRACE
        )  # before a lost node's pod is gone
        self._listeners: set[Callable[[str], None]] = set()  # ``on_change``

    @classmethod
    def from_target(cls, target: Target) -> KubernetesBackend:
        return cls(target)

    @property
    def scope(self) -> str:
        return f"kubernetes:{self.client.where}/{self.namespace}"

    # ---- launch -------------------------------------------------------------------------
    def check_launch(self, spec: LaunchSpec) -> None:
        """Build the Job without sending it: a bad pod option or template raises ConfigError
        before the submission writes anything. A batch driver must be able to use the pod's
        service-account token (it reaches the API in-cluster): refused here otherwise."""
        manifest = self._manifest(spec)
        if DRIVER_TAG in spec.labels:
            pod = _pod_template(manifest)["spec"]
            if pod.get("automountServiceAccountToken") is False:
                raise ConfigError(
                    "A detached batch's driver reaches the Kubernetes API with its pod's "
                    "service-account token, but the target's pod options set "
                    "automountServiceAccountToken: false: remove it from the target's "
                    "pod_template (the driver would have no credentials)."
                )
            self._check_driver_access(spec)

    def _check_driver_access(self, spec: LaunchSpec) -> None:
        """Ask the API server (a SubjectAccessReview) whether the driver's service account
        may do what a driver does (``DRIVER_NEEDS``); refuse the batch up front with
        ``PermissionDenied`` naming what it lacks, before anything is written (else the
        driver fails seconds after ``submit_map`` returned, and its children never launch).
        A submitter that may not ask (no ``create`` on ``subjectaccessreviews``), or an
        API that does not answer, is not refused: the driver's own error says it then."""
        account = spec.target.service_account or "default"
        user = f"system:serviceaccount:{self.namespace}:{account}"
        groups = [
            "system:serviceaccounts",
            f"system:serviceaccounts:{self.namespace}",
            "system:authenticated",
        ]
        needs = [*DRIVER_NEEDS, *([("", "secrets", "create")] if spec.target.signing_key else [])]
        for group, resource, verb in needs:
            review = {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": user,
                    "groups": groups,
                    "resourceAttributes": {
                        "namespace": self.namespace,
                        "verb": verb,
                        "group": group,
                        "resource": resource,
                    },
                },
            }
            try:
                answer = self.client.call(
                    "POST",
                    "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                    body=review,
                    what=f"ask whether service account {account} may {verb} {resource}",
                )
            except (BackendError, ConfigError) as exc:
                log.debug("kinetic: cannot check the batch driver's permissions: %s", exc)
                return
            if not (answer.get("status") or {}).get("allowed"):
                raise PermissionDenied(
                    f"A detached batch's driver runs as service account {account} in namespace "
                    f"{self.namespace}, which may not {verb} {resource}"
                    f"{f' ({group})' if group else ''}: grant it in a Role bound to that "
                    "service account (the batch's children are launched with it), or set the "
                    "target's service_account to one that may. Nothing was submitted.",
                    verb=verb,
                    resource=resource,
                    namespace=self.namespace,
                    user=user,
                )

    def _manifest(self, spec: LaunchSpec) -> dict[str, Any]:
        """The job's Job, or its JobSet (multi-host or queued): a ConfigError saying to
        install JobSet where the API server does not serve it, before anything is made."""
        if not js.needs_jobset(spec.target):
            return job_manifest(spec, self.namespace)
        if not self.client.serves(js.GROUP, js.VERSION):
            why = (
                f"a multi-host job ({js.hosts(spec.target)} hosts)"
                if js.hosts(spec.target) > 1
                else f"a queued job (queue={spec.target.queue!r})"
            )
            raise ConfigError(
                f"{why} runs as a JobSet ({js.GROUP}/{js.VERSION}), which the Kubernetes API "
                f"server of {self.client.where} does not serve: install the JobSet controller "
                f"({js.INSTALL_DOCS}; on GKE it is what multi-host TPU slices use), and for "
                "queue= Kueue with its jobset integration enabled. Nothing was created."
            )
        return js.jobset_manifest(spec, self.namespace)

    def launch(self, spec: LaunchSpec) -> None:
        """Create the Job (idempotent: an existing Job for this id counts as launched; its
        Secret is created again if someone deleted it)."""
        at: int | None = None
        kind = "jobs"
        try:
            created = self.create_job(spec)
            at = revision((created.get("metadata") or {}).get("resourceVersion"))
            kind = "jobsets" if created.get("kind") == "JobSet" else "jobs"
        finally:
            self._wrote(spec.job_id, at, (kind,))

    def create_job(self, spec: LaunchSpec, *, dry_run: bool = False) -> dict[str, Any]:
        """Create (or with ``dry_run`` server-side validate) the Job; returns what the API says.

        Order, so that a submitter killed at any point leaves nothing unowned: the Job (or
        JobSet) first, then its signing-key Secret, created owned by it (so the Job's TTL,
        or anyone's delete of it, removes the Secret too; issue 34). The Job's pod waits
        for its Secret (a kubelet retries a missing Secret; it comes milliseconds after the
        Job). A submitter killed in between leaves a Job whose pod waits: a keyed resubmit
        launches it again (the Secret is made then), else it ends ``SecretMissing`` and its
        TTL removes it. A refused Secret (400/422, 403) takes the Job this call created
        back. A transient error stays a transient ``BackendError`` (the caller's policy
        retries it), after a GET tells whether the create reached the server (its answer
        lost)."""
        manifest = self._manifest(spec)
        name = manifest["metadata"]["name"]
        try:
            created, new = self._post_job(manifest, dry_run)
        except _JobAbsent as exc:
            raise exc.error from None
        if spec.target.signing_key and not dry_run:
            try:
                self._create_secret(spec, created)
            except (SubmissionError, PermissionDenied):
                if new:  # its pod never ran the function (it had no Secret): take it back
                    plural = "jobsets" if manifest["kind"] == "JobSet" else "jobs"
                    self._undo(self.client.ns(plural, name), f"{manifest['kind']} {name}")
                raise
        return created

    def _post_job(self, manifest: dict[str, Any], dry_run: bool) -> tuple[dict[str, Any], bool]:
        """POST the Job; an existing one (409, or a create whose answer was lost) is read.
        Returns the Job and whether this POST created it."""
        name, kind = manifest["metadata"]["name"], manifest["kind"]
        plural = "jobsets" if kind == "JobSet" else "jobs"
        query = {"dryRun": "All"} if dry_run else None
        try:
            answer = self.client.call(
                "POST",
                self.client.ns(plural),
                body=manifest,
                query=query,
                what=f"create {kind} {name}",
            )
            return dict(answer), True
        except BackendError as exc:
            if exc.status in (400, 422):
                reason = getattr(exc, "reason", str(exc))
                raise SubmissionError(f"Kubernetes rejected {kind} {name}: {reason}") from exc
            if dry_run and exc.status != 409:
                raise
            try:  # it exists (409), or the create reached the server and its answer was lost
                return dict(self.client.call("GET", self.client.ns(plural, name))), False
            except KubeApiError as missing:
                if missing.status != 404:
                    raise exc from None
                raise _JobAbsent(exc) from None
            except BackendError:
                raise exc from None  # unknown whether it exists: stays what it was

    def _create_secret(self, spec: LaunchSpec, owner: dict[str, Any]) -> None:
        """The signing-key Secret, owned by ``owner`` (the Job or JobSet) from its creation.
        One that exists already (a launch again, or one an older version made before its
        Job and never gave an owner) is given the owner (best effort)."""
        name = job_name(spec.job_id)
        body = secret_manifest(spec)
        body["metadata"].update(owner_patch(name, owner)["metadata"])
        try:
            self.client.call(
                "POST", self.client.ns("secrets"), body=body, what=f"create Secret {name}"
            )
        except KubeApiError as exc:
            if exc.status == 409:
                self._own_secret(name, owner)
                return
            if exc.status in (400, 422):
                raise SubmissionError(f"Kubernetes rejected Secret {name}: {exc.reason}") from exc
            raise

    def _own_secret(self, name: str, job: dict[str, Any]) -> None:
        """Make the Job own an existing Secret; a failure is logged (cancel and cleanup
        delete the Secret by name)."""
        try:
            self.client.call(
                "PATCH",
                self.client.ns("secrets", name),
                body=owner_patch(name, job),
                what=f"make {job.get('kind', 'Job')} {name} own Secret {name}",
                content_type="application/merge-patch+json",
            )
        except (BackendError, ConfigError) as exc:
            log.warning("kinetic: %s (the job runs; cleanup deletes the Secret)", exc)

    def _undo(self, path: str, what: str) -> None:
        """Best effort: delete what a failed submit created (an outage or a missing verb
        leaves it labelled with the job id, where cancel and cleanup find it)."""
        try:
            self._delete(what, path, {"propagationPolicy": "Background"})
        except (BackendError, ConfigError) as exc:
            log.warning("kinetic: could not take back %s of a failed submit: %s", what, exc)

    # ---- poll ---------------------------------------------------------------------------
    def poll(self, job_ids: list[str]) -> dict[str, BackendState]:
        """The Jobs and Pods of ``job_ids`` (from the watch's caches, each job at one instant
        of the server, else one LIST of each, selected by the ids); where a watched id has no
        plain Job (a multi-host or queued job, or none), its JobSets likewise, and for queued
        JobSets not yet admitted one LIST of their Workloads."""
        # An id that is no label value cannot have been launched (its Job would be invalid).
        ids = sorted({j for j in job_ids if valid_labels({"id": j})})
        watch = namespace_watch(self.client)
        if watch is not None:
            watch.mark_read()
            watch.listen(self._listeners)
        read = self._watched(watch, ids) if watch is not None and ids else None
        jobs, pods, sets = read if read is not None else self._listed(ids)
        jobs_by_id: dict[str, list[dict[str, Any]]] = {}
        for job in jobs:
            jobs_by_id.setdefault(_job_id(job), []).append(job)
        plain = {i: jobs_by_id[i][0] for i in _plain_ids(jobs)}
        jobsets = {_job_id(s): s for s in sets if _job_id(s) not in plain}
        workloads = self._workloads(list(jobsets.values()))
        pods_by_job: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            pods_by_job.setdefault(_job_id(pod), []).append(pod)
        nodes = self._nodes_of(pods)
        out: dict[str, BackendState] = {}
        for job_id in job_ids:
            its_pods = pods_by_job.get(job_id, [])
            if job_id in jobsets:
                jobset = jobsets[job_id]
                workload = workloads.get(jobset["metadata"].get("uid", ""))
                children = jobs_by_id.get(job_id, [])
                out[job_id] = jobset_state(
                    jobset, children, its_pods, nodes, workload, self.lost_grace
                )
            else:
                out[job_id] = job_state(plain.get(job_id), its_pods, nodes, self.lost_grace)
        return out

    def _listed(self, ids: list[str]) -> _Objects:
        """The Jobs, Pods and (for the ids without a plain Job, where JobSet is served)
        JobSets of ``ids``, by LIST."""
        jobs = self._list("jobs", ids)
        pods = self._list("pods", ids)
        have = _plain_ids(jobs)
        others = [i for i in ids if i not in have]
        serves = bool(others) and self.client.serves(js.GROUP, js.VERSION)
        return jobs, pods, self._list("jobsets", others) if serves else []

    def _watched(self, watch: NamespaceWatch, ids: list[str]) -> _Objects | None:
        """``_listed`` from the watch's caches, each job at one instant (``instant``). A job
        the caches hold at no common instant (its latest events are still on their way in
        another stream) waits up to ``TORN_WAIT`` for the lagging caches to reach the
        newest one (``catch_up``); one still torn then is read at the newest cache's
        resourceVersion (``_torn``). A job of which no cache holds anything is LISTed: a
        cache may not have seen a launch yet (absence is the one answer that a later event
        can take back), and status reads "not found" after a recorded launch as a deleted
        job. None: the caches cannot answer, or the server would not LIST at a version:
        LIST it all."""
        deadline = time.monotonic() + kube_watch.TORN_WAIT
        for kind, rv in watch.unseen_writes(ids).items():  # our own write's event is near
            watch.catch_up([kind], rv, deadline - time.monotonic())
        while True:
            read = self._cached(watch, ids)
            if read is None:
                return None
            views, torn, absent, asks_sets = read
            left = deadline - time.monotonic()
            need = _needed(views, torn)
            behind = [view.kind for view in views if view.at < need]
            if not torn or not behind or left <= 0:
                break
            if not watch.catch_up(behind, need, left) and time.monotonic() < deadline:
                break  # a cache stopped answering: read what is torn now by LIST
        found: dict[str, list[dict[str, Any]]] = {"jobs": [], "pods": [], "jobsets": []}
        apart = {*torn, *absent}
        for view in views:
            found[view.kind] += [o for i in ids if i not in apart for o in view.jobs[i].objects]
        if torn:
            try:
                self._torn(watch, torn, views, found, asks_sets)
            except _NotExact as exc:
                log.debug("kinetic: %s; this poll LISTs", exc)
                return None
        if absent:
            for kind, listed in zip(found, self._listed(sorted(absent)), strict=True):
                found[kind] += listed
        by_name = [sorted(found[k], key=lambda o: str(o["metadata"]["name"])) for k in found]
        return by_name[0], by_name[1], by_name[2]

    def _cached(
        self, watch: NamespaceWatch, ids: list[str]
    ) -> tuple[list[KindView], list[str], set[str], bool] | None:
        """What the caches hold of ``ids`` now: their views, the jobs held at no common
        instant (torn), the jobs no cache holds (absent), and whether JobSets are asked
        for. None: a cache cannot answer."""
        jobs, pods = watch.view("jobs", ids), watch.view("pods", ids)
        if jobs is None or pods is None:
            return None
        others = {i for i in ids if not _plain_ids(jobs.jobs[i].objects)}
        asks_sets = bool(others) and self.client.serves(js.GROUP, js.VERSION)
        sets = watch.view("jobsets", ids) if asks_sets else None  # None while it syncs
        views = [v for v in (jobs, pods, sets) if v is not None]
        absent = {  # nothing in any cache that counts (an unsynced JobSet cache knows nothing)
            i
            for i in ids
            if not jobs.jobs[i].objects
            and not pods.jobs[i].objects
            and (not asks_sets or sets is None or not sets.jobs[i].objects)
        }
        torn = []
        for i in ids:
            if i in absent:
                continue
            held = [jobs.jobs[i], pods.jobs[i]]
            if i in others and asks_sets:
                if sets is None:
                    torn.append(i)
                    continue
                held.append(sets.jobs[i])
            if instant(held) is None and (i in others or not counts_agree(*held[:2])):
                torn.append(i)
        return views, torn, absent, asks_sets

    def _torn(
        self,
        watch: NamespaceWatch,
        torn: list[str],
        views: list[KindView],
        found: dict[str, list[dict[str, Any]]],
        asks_sets: bool,
    ) -> None:
        """Read the ``torn`` jobs at the newest cache's resourceVersion into ``found``: each
        kind from its cache where that holds there, else by a LIST at exactly that version,
        which confirms the cache of each job whose objects it shows as cached (the next
        poll answers from it). JobSets for those without a plain Job then."""
        at = max(view.at for view in views)
        by_kind = {view.kind: view for view in views}
        for kind in ("jobs", "pods", "jobsets"):
            wanted = torn
            if kind == "jobsets":
                plain = _plain_ids(found["jobs"])
                wanted = [i for i in torn if i not in plain]
                if not wanted or not (asks_sets or self.client.serves(js.GROUP, js.VERSION)):
                    continue
            view = by_kind.get(kind)
            cached = [i for i in wanted if view is not None and view.jobs[i].holds_at(at)]
            if view is not None:
                found[kind] += [o for i in cached for o in view.jobs[i].objects]
            behind = [i for i in wanted if i not in cached]
            if not behind:
                continue
            listed = self._list(kind, behind, at=at)
            found[kind] += listed
            if view is not None:
                by_id: dict[str, list[dict[str, Any]]] = {i: [] for i in behind}
                for obj in listed:
                    by_id.setdefault(_job_id(obj), []).append(obj)
                watch.confirm(view, at, by_id)

    def _wrote(self, job_id: str, rv: int | None, kinds: tuple[str, ...]) -> None:
        """This process wrote the job's ``kinds`` at ``rv``: its polls read them from a
        cache once that stands there (``NamespaceWatch.wrote``; None: from the server for
        a moment)."""
        watch = namespace_watch(self.client, create=False)
        if watch is not None:
            watch.wrote(job_id, rv, kinds)

    def _list(self, plural: str, ids: list[str], at: int | None = None) -> list[dict[str, Any]]:
        """``plural`` objects labelled with one of ``ids``, in chunks of ``POLL_CHUNK``;
        with ``at``, as they were at exactly that resourceVersion (``_NotExact`` where the
        server will not say: compacted, or a server that ignores the parameter)."""
        items: list[dict[str, Any]] = []
        for start in range(0, len(ids), POLL_CHUNK):
            chunk = ",".join(ids[start : start + POLL_CHUNK])
            query = {"labelSelector": f"app=kinetic,kinetic/job-id in ({chunk})"}
            if at is not None:
                query |= {"resourceVersion": str(at), "resourceVersionMatch": "Exact"}
            try:
                page = self.client.call("GET", self.client.ns(plural), query=query)
            except KubeApiError as exc:
                if at is None or exc.transient:
                    raise
                raise _NotExact(f"cannot LIST {plural} at resourceVersion {at}: {exc}") from exc
            answered = (page.get("metadata") or {}).get("resourceVersion")
            if at is not None and revision(answered) != at:
                raise _NotExact(f"the LIST of {plural} at {at} answered at {answered}")
            items += page["items"]
        return items

    def _workloads(self, jobsets: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The Kueue Workloads of the queued JobSets not yet admitted (suspended), by the
        JobSet's uid (Kueue labels its Workload ``kueue.x-k8s.io/job-uid``); nothing is
        read while none waits. Without Kueue (or permission) the answer is empty."""
        uids = sorted(
            j["metadata"]["uid"]
            for j in jobsets
            if j.get("spec", {}).get("suspend") and js.QUEUE_LABEL in j["metadata"]["labels"]
        )
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(uids), POLL_CHUNK):
            chunk = ",".join(uids[start : start + POLL_CHUNK])
            query = {"labelSelector": f"{WORKLOAD_UID_LABEL} in ({chunk})"}
            try:
                items = self.client.call("GET", self.client.ns("workloads"), query=query)["items"]
            except (KubeApiError, PermissionDenied) as exc:
                log.debug("kinetic: cannot read Kueue Workloads: %s", exc)
                return found
            for item in items:
                found[item["metadata"]["labels"].get(WORKLOAD_UID_LABEL, "")] = item
        return found

    def _nodes_of(self, pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The Nodes of pods that run but stopped being Ready: is their node lost?
        Nothing is read while every pod is fine. Without permission to read Nodes the
        answer is "unknown" (an empty dict), never an error of the poll."""
        names = {p["spec"].get("nodeName") for p in pods if pod_not_ready(p)} - {None}
        nodes: dict[str, dict[str, Any]] = {}
        for name in sorted(names):
            try:
                nodes[name] = self.client.call(
                    "GET", f"/api/v1/nodes/{name}", what=f"read Node {name}"
                )
            except (KubeApiError, ConfigError):
                continue
        return nodes

    def on_change(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(job_id)`` (on the watch's thread) whenever a watch event changes
        a job of this namespace: how the async shared poller polls a job at once instead of
        at its next tick. Registered with the watch at every poll (a watch that stopped
        when idle and started again keeps its listeners)."""
        self._listeners.add(listener)
        watch = namespace_watch(self.client, create=False)
        if watch is not None:
            watch.listen([listener])

    def sleep_until_change(self, job_ids: list[str], timeout: float) -> None:
        """Sleep up to ``timeout``, woken by the first watch event that touches one of the
        jobs (a plain sleep while the watch is off or not synced: polls LIST then)."""
        watch = namespace_watch(self.client, create=False)
        if watch is None:
            time.sleep(timeout)
            return
        watch.wait(job_ids, timeout)

    # ---- logs ---------------------------------------------------------------------------
    def job_pods(self, job_id: str, worker: int | None = None) -> list[dict[str, Any]]:
        """The job's pods; ``worker`` of a multi-host job: the pods of that JobSet index."""
        selector = f"kinetic/job-id={job_id}"
        if worker is not None:
            selector += f",{WORKER_INDEX_LABEL}={int(worker)}"
        pods = self.client.call("GET", self.client.ns("pods"), query={"labelSelector": selector})
        return list(pods["items"])

    def _job_log(self, job_id: str, worker: int | None = None) -> JobLog:
        """The job's (worker's) log: its pod while that exists, then what its runner kept
        in storage. ``worker`` of a multi-host job: the pod of that JobSet index."""
        return JobLog(
            open_storage(self.storage_uri),
            job_id,
            pods=lambda: self.job_pods(job_id, worker),
            pod_log=self._pod_log,
            worker=worker or 0,
        )

    def port_forward(
        self, job_id: str, ports: list[PortSpec], worker: int | None = None
    ) -> PortForward:
        """Forward local ports to the job's running pod (``port_forward.py``)."""
        return port_forward(self.client, job_id, self.job_pods(job_id, worker), ports, worker)

    def _pod_log(self, pod: str, **query: Any) -> str | None:
        """The kinetic container's log (a pod may hold sidecars); None when the pod is gone
        or its container has not started."""
        query["container"] = KINETIC_CONTAINER
        try:
            return str(
                self.client.call(
                    "GET",
                    self.client.ns("pods", pod) + "/log",
                    query=query,
                    raw=True,
                    what=f"logs of pod {pod}",
                )
            )
        except KubeApiError as exc:
            if exc.status in (400, 404):  # container not started yet, or pod gone
                return None
            raise

    def logs(self, job_id: str, tail: int | None = None, worker: int | None = None) -> str:
        return self._job_log(job_id, worker).text(tail)

    def read_logs(
        self, job_id: str, cursor: str | None, worker: int | None = None
    ) -> tuple[str, str | None]:
        """New output since ``cursor``: one cursor across the pod and storage (pod_logs.py)."""
        return self._job_log(job_id, worker).read(cursor)

    def log_complete(self, job_id: str, worker: int | None = None) -> bool:
        """No more output comes to the job's (worker's) log (``JobLog.complete``)."""
        return self._job_log(job_id, worker).complete()

    # ---- stop ---------------------------------------------------------------------------
    def _stop(
        self, job_id: str, query: dict[str, Any] | None = None, *, pods: bool = True
    ) -> int | None:
        """Delete what the job has (``query``: e.g. a server-side dry run): its Job
        (foreground: its pods go first); where no plain Job was there (a multi-host or
        queued job, or one already gone) its JobSet where JobSet is served and the
        JobSet's child Jobs that exist (an orphaning delete of the JobSet leaves them, and
        each would replace the worker pod deleted next); then every pod carrying its label
        (also pods an orphaning deletion left without a Job); its Secret unless the Job
        deleted showed none (the Secret exists only for a job with a signing key, whose
        pod reads it). Jobs go before pods: a Job being deleted makes no new pod. A plain
        Job's id names one execution, so a job that had one has no JobSet: deleting one
        that cannot exist cost a request per cleanup (issue 37). Returns the newest
        resourceVersion the answers carried (what a poll must see to read the deletes).
        ``pods`` False (the cleanup of an ended job): no pods DELETE where the plain Job
        was deleted, whose foreground deletion removes its pods (the garbage collector
        deletes a Job's dependents before the Job)."""
        extra = query or {}
        name = job_name(job_id)
        foreground = {"propagationPolicy": "Foreground", **extra}
        job = self._delete(f"Job {name}", self.client.ns("jobs", name), foreground)
        answers = [job]
        if job is None and self.client.serves(js.GROUP, js.VERSION):
            path = self.client.ns("jobsets", name)
            answers.append(self._delete(f"JobSet {name}", path, foreground))
            for child in self._child_jobs(job_id):
                path = self.client.ns("jobs", child)
                answers.append(self._delete(f"Job {child}", path, foreground))
        if pods or job is None:
            selector = {"labelSelector": f"app=kinetic,kinetic/job-id={job_id}", **extra}
            path = self.client.ns("pods")
            answers.append(self._delete(f"pods of job {job_id}", path, selector))
        if job is None or _reads_secret(job, name):
            answers.append(self._delete(f"Secret {name}", self.client.ns("secrets", name), extra))
        objects = [o for a in answers if a for o in (a, *(a.get("items") or []))]
        versions = [revision((o.get("metadata") or {}).get("resourceVersion")) for o in objects]
        return max((v for v in versions if v is not None), default=None)

    def _child_jobs(self, job_id: str) -> list[str]:
        """The names of the job's JobSet child Jobs (``<jobset>-workers-<i>``) that exist."""
        query = {"labelSelector": f"app=kinetic,kinetic/job-id={job_id},{js.JOBSET_NAME}"}
        found = self.client.call(
            "GET", self.client.ns("jobs"), query=query, what=f"list the Jobs of job {job_id}"
        )
        return sorted(str(j["metadata"]["name"]) for j in found["items"])

    def check_cancel(self, job_id: str) -> None:
        """Raise ``PermissionDenied`` when ``cancel`` would be refused: each delete is sent
        as a server-side dry run (authorization and admission, nothing deleted), so a
        cancel is recorded only when the backend will take it."""
        self._stop(job_id, {"dryRun": "All"})

    def cancel(self, job_id: str) -> None:
        """Delete the job's Job (or JobSet and its Jobs), every pod of the job by label, and
        its Secret (``_stop``); absent is fine."""
        self._stopped(job_id, pods=True)

    def delete(self, job_id: str) -> None:
        """Clean up an ended job: ``cancel`` less the pods' DELETE where its plain Job was
        there, whose foreground deletion takes its (ended) pods: one request less on every
        ``result()`` (issue 37). What no Job owns (a JobSet's pods, a Job gone already,
        pods an orphaning deletion left) is still deleted by label."""
        self._stopped(job_id, pods=False)

    def _stopped(self, job_id: str, *, pods: bool) -> None:
        at: int | None = None
        try:
            at = self._stop(job_id, pods=pods)
        finally:
            self._wrote(job_id, at, ("jobs", "pods", "jobsets"))

    def _delete(self, what: str, path: str, query: dict[str, Any]) -> dict[str, Any] | None:
        """The DELETE's answer (the object, or the list deleted), None when absent."""
        try:
            answer = self.client.call("DELETE", path, query=query or None, what=f"delete {what}")
        except KubeApiError as exc:
            if exc.status != 404:
                raise
            return None
        return answer if isinstance(answer, dict) else {}
