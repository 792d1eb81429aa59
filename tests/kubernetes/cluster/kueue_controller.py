"""A Kueue stand-in for the 1.20 test cluster: queued admission of JobSets
(``kueue.x-k8s.io/v1beta1``).

Mirrors kubernetes-sigs/kueue v0.19.2: ``pkg/controller/jobframework/reconciler.go`` (a job
with a queue-name label gets a Workload; stopped while not admitted; started with the
admission's node selectors once admitted; the Workload finished with the job),
``pkg/controller/jobs/jobset/jobset_controller.go`` (pod sets = replicatedJobs, count =
replicas x parallelism; RunWithPodSetsInfo merges each flavor's nodeLabels into the
replicatedJob's pod template and unsuspends), ``pkg/scheduler/scheduler.go`` and
``pkg/scheduler/flavorassigner/flavorassigner.go`` (flavor assignment against nominalQuota,
the "couldn't assign flavors to pod set ..." messages, QuotaReserved=False reason Pending),
``pkg/controller/core/workload_controller.go`` (getQueueBlocker: "LocalQueue X doesn't
exist", "ClusterQueue X doesn't exist", reason Inadmissible in the legacy condition),
``pkg/workload/admission.go`` and ``apis/kueue/v1beta1/workload_types.go`` (condition types,
status.admission) and ``pkg/util/priority`` (WorkloadPriorityClass value -> spec.priority).

Implemented:

* for a JobSet labelled ``kueue.x-k8s.io/queue-name``: a Workload ``jobset-<name>-<hash>``
  owned by it (controller reference), label ``kueue.x-k8s.io/job-uid``, ``queueName``, one
  pod set per replicatedJob, ``priorityClassName``/``priority``/``priorityClassSource`` from
  the ``kueue.x-k8s.io/priority-class`` label's WorkloadPriorityClass; a JobSet that runs
  unadmitted is suspended (upstream's webhook suspends it at creation; there is no webhook
  here, so create it suspended);
* admission, pending Workloads by priority then age: each requested resource
  (requests, else limits, of every container, x count) is assigned the first flavor of the
  ClusterQueue resource group covering it whose ResourceFlavor exists and whose nodeLabels
  do not contradict the pod set's nodeSelector, and that has room under ``nominalQuota``
  after the admitted, unfinished Workloads' usage; fit: ``status.admission``
  (clusterQueue, podSetAssignments with flavors, resourceUsage, count), conditions
  QuotaReserved (QuotaReserved, "Quota reserved in ClusterQueue X") and Admitted (Admitted,
  "The workload is admitted") True, then the JobSet gets the flavors' nodeLabels as node
  selectors and ``suspend: false``; no fit: QuotaReserved False, reason Pending, message
  "couldn't assign flavors to pod set P: insufficient quota for R in flavor F, previously
  considered podsets requests (A) + current podset request (B) > maximum capacity (C)" or
  "insufficient unused quota for R in flavor F, N more needed" or "resource R unavailable in
  ClusterQueue"; a missing LocalQueue or ClusterQueue: QuotaReserved False, reason
  Inadmissible, "LocalQueue X doesn't exist" / "ClusterQueue X doesn't exist";
* quota release: when the JobSet is Completed or Failed, the Workload gets Finished True
  (reason Succeeded/Failed, the JobSet condition's message) and stops counting; raising a
  ClusterQueue's nominalQuota admits a waiting Workload on the next pass.

Not implemented: cohorts and borrowing, preemption, fair sharing, admission checks,
partial admission, multiple flavors' node taints/tolerations, namespaceSelector,
StrictFIFO head-of-line blocking, PodsReady, ClusterQueue/LocalQueue status, events, and
job kinds other than JobSet.
"""

from __future__ import annotations

import copy
import hashlib
import sys
from collections import defaultdict
from decimal import Decimal
from typing import Any

import stand_in
from node_agent import Kube, KubeError

API = "/apis/kueue.x-k8s.io/v1beta1"
JOBSET_API = "/apis/jobset.x-k8s.io/v1alpha2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
_SUFFIXES = {
    "m": Decimal("0.001"), "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9),
    "T": Decimal(10**12), "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
}  # fmt: skip
Usage = dict[tuple[str, str], Decimal]  # (flavor, resource) -> amount


def quantity(value: Any) -> Decimal:
    """A resource.Quantity as a number (the suffixes requests use)."""
    text = str(value)
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix):
            return Decimal(text[: -len(suffix)]) * _SUFFIXES[suffix]
    return Decimal(text)


def show(amount: Decimal) -> str:
    """ResourceQuantityString for the counts used here: whole numbers, else milli-units."""
    return str(int(amount)) if amount == amount.to_integral() else f"{int(amount * 1000)}m"


def workload_name(js: dict[str, Any]) -> str:
    """GetWorkloadNameForOwnerWithGVK: jobset-<name>-<5 hex of a hash>."""
    digest = hashlib.sha1(f"{js['metadata']['name']}jobset.x-k8s.io/JobSet".encode()).hexdigest()
    return f"jobset-{js['metadata']['name']}-{digest[:5]}"


def pod_sets(js: dict[str, Any]) -> list[dict[str, Any]]:
    """jobset_controller.go PodSets: one per replicatedJob, count = replicas x parallelism."""
    sets = []
    for rjob in js["spec"]["replicatedJobs"]:
        job_spec = rjob["template"]["spec"]
        count = int(rjob.get("replicas", 1)) * int(job_spec.get("parallelism", 1))
        sets.append({"name": rjob["name"], "count": count, "template": job_spec["template"]})
    return sets


def pod_requests(pod_set: dict[str, Any]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = defaultdict(Decimal)
    for container in pod_set["template"]["spec"].get("containers", []):
        resources = container.get("resources") or {}
        for name, value in {
            **(resources.get("limits") or {}),
            **(resources.get("requests") or {}),
        }.items():
            total[name] += quantity(value) * int(pod_set["count"])
    return dict(total)


class Kueue:
    """One pass: workloads for queued JobSets, admission, JobSet start/stop, finishing."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.flavors = {f["metadata"]["name"]: f for f in self._list(f"{API}/resourceflavors")}
        self.cqs = {c["metadata"]["name"]: c for c in self._list(f"{API}/clusterqueues")}
        self.lqs = {
            (q["metadata"]["namespace"], q["metadata"]["name"]): q
            for q in self._list(f"{API}/localqueues")
        }
        self.workloads = self._list(f"{API}/workloads")
        self.usage: dict[str, Usage] = defaultdict(lambda: defaultdict(Decimal))
        for wl in self.workloads:
            self._count(wl)

    def _list(self, path: str) -> list[dict[str, Any]]:
        return list(self.kube.request("GET", path)["items"])

    def _count(self, wl: dict[str, Any]) -> None:
        admission = wl.get("status", {}).get("admission")
        if not admission or stand_in.is_true(wl, "Finished"):
            return
        usage = self.usage[admission["clusterQueue"]]
        for assignment in admission["podSetAssignments"]:
            for resource, flavor in (assignment.get("flavors") or {}).items():
                amount = (assignment.get("resourceUsage") or {}).get(resource, 0)
                usage[(flavor, resource)] += quantity(amount)

    def run(self) -> None:
        jobsets = [
            js
            for js in self.kube.request("GET", f"{JOBSET_API}/jobsets")["items"]
            if QUEUE_LABEL in (js["metadata"].get("labels") or {})
            and not js["metadata"].get("deletionTimestamp")
        ]
        by_owner = {
            ref["uid"]: wl
            for wl in self.workloads
            for ref in wl["metadata"].get("ownerReferences") or []
        }
        for js in jobsets:
            wl = by_owner.get(js["metadata"]["uid"])
            if wl is None:
                self._create_workload(js)
            else:
                self._sync_job(js, wl)
        for wl in sorted(self.workloads, key=_queue_order):
            if not wl.get("status", {}).get("admission") and not stand_in.is_true(wl, "Finished"):
                self._try_admit(wl)

    # ---- the job side (jobframework reconciler) ----------------------------------------------

    def _create_workload(self, js: dict[str, Any]) -> None:
        meta = js["metadata"]
        spec: dict[str, Any] = {"queueName": meta["labels"][QUEUE_LABEL], "podSets": pod_sets(js)}
        priority_class = meta["labels"].get(PRIORITY_LABEL)
        if priority_class:
            wpc = self.kube.request("GET", f"{API}/workloadpriorityclasses/{priority_class}")
            spec.update(
                priorityClassName=priority_class,
                priority=int(wpc["value"]),
                priorityClassSource="kueue.x-k8s.io/workloadpriorityclass",
            )
        workload = {
            "apiVersion": "kueue.x-k8s.io/v1beta1",
            "kind": "Workload",
            "metadata": {
                "name": workload_name(js),
                "namespace": meta["namespace"],
                "labels": {JOB_UID_LABEL: meta["uid"]},
                "ownerReferences": [stand_in.owner_reference(js)],
            },
            "spec": spec,
        }
        try:
            self.kube.request("POST", f"{API}/namespaces/{meta['namespace']}/workloads", workload)
        except KubeError as err:
            if err.status != 409:
                raise
        if not js["spec"].get("suspend"):
            self._patch_jobset(js, {"spec": {"suspend": True}})

    def _sync_job(self, js: dict[str, Any], wl: dict[str, Any]) -> None:
        finished = [k for k in ("Completed", "Failed") if stand_in.is_true(js, k)]
        if finished and not stand_in.is_true(wl, "Finished"):
            cond = stand_in.find_condition(js, finished[0]) or {}
            reason = "Succeeded" if finished[0] == "Completed" else "Failed"
            conditions = copy.deepcopy(wl.get("status", {}).get("conditions") or [])
            stand_in.set_condition(conditions, "Finished", "True", reason, cond.get("message", ""))
            self._write_status(wl, {**wl.get("status", {}), "conditions": conditions})
            wl.setdefault("status", {})["conditions"] = conditions
        elif not wl.get("status", {}).get("admission") and not js["spec"].get("suspend"):
            self._patch_jobset(js, {"spec": {"suspend": True}})

    def _start_job(self, wl: dict[str, Any], assignments: list[dict[str, Any]]) -> None:
        """RunWithPodSetsInfo: node selectors of the assigned flavors, then unsuspend."""
        owner = next(r for r in wl["metadata"]["ownerReferences"] if r["kind"] == "JobSet")
        path = f"{JOBSET_API}/namespaces/{wl['metadata']['namespace']}/jobsets/{owner['name']}"
        js = self.kube.request("GET", path)
        flavors_of = {a["name"]: set(a["flavors"].values()) for a in assignments}
        for rjob in js["spec"]["replicatedJobs"]:
            pod_spec = rjob["template"]["spec"]["template"]["spec"]
            for flavor in sorted(flavors_of.get(rjob["name"], ())):
                labels = self.flavors[flavor]["spec"].get("nodeLabels") or {}
                pod_spec["nodeSelector"] = {**(pod_spec.get("nodeSelector") or {}), **labels}
        js["spec"]["suspend"] = False
        self.kube.request("PUT", path, js)

    def _patch_jobset(self, js: dict[str, Any], body: dict[str, Any]) -> None:
        meta = js["metadata"]
        path = f"{JOBSET_API}/namespaces/{meta['namespace']}/jobsets/{meta['name']}"
        stand_in.merge_patch(self.kube, path, body)

    # ---- the scheduler side -------------------------------------------------------------------

    def _try_admit(self, wl: dict[str, Any]) -> None:
        namespace = wl["metadata"]["namespace"]
        queue = wl["spec"].get("queueName", "")
        lq = self.lqs.get((namespace, queue))
        if lq is None:
            self._pending(wl, "Inadmissible", f"LocalQueue {queue} doesn't exist")
            return
        cq_name = lq["spec"].get("clusterQueue", "")
        cq = self.cqs.get(cq_name)
        if cq is None:
            self._pending(wl, "Inadmissible", f"ClusterQueue {cq_name} doesn't exist")
            return
        assignments, message = self._assign(wl, cq)
        if message:
            self._pending(wl, "Pending", message)
            return
        status = copy.deepcopy(wl.get("status") or {})
        status["admission"] = {"clusterQueue": cq_name, "podSetAssignments": assignments}
        conditions = status.setdefault("conditions", [])
        stand_in.set_condition(
            conditions, "QuotaReserved", "True", "QuotaReserved",
            f"Quota reserved in ClusterQueue {cq_name}",
        )  # fmt: skip
        stand_in.set_condition(
            conditions, "Admitted", "True", "Admitted", "The workload is admitted"
        )
        self._write_status(wl, status)
        wl["status"] = status
        self._count(wl)
        self._start_job(wl, assignments)

    def _assign(self, wl: dict[str, Any], cq: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
        """flavorassigner: per pod set, per resource, the first flavor with room."""
        usage = self.usage[cq["metadata"]["name"]]
        considered: Usage = defaultdict(Decimal)
        assignments, failures = [], []
        for pod_set in wl["spec"]["podSets"]:
            flavors: dict[str, str] = {}
            reasons: list[str] = []
            requests = pod_requests(pod_set)
            for resource, amount in sorted(requests.items()):
                flavor, why = self._flavor_for(cq, pod_set, resource, amount, usage, considered)
                if flavor:
                    flavors[resource] = flavor
                else:
                    reasons.append(why)
            if reasons:
                failures.append(
                    f"couldn't assign flavors to pod set {pod_set['name']}: " + ", ".join(reasons)
                )
                continue
            for resource, flavor in flavors.items():
                considered[(flavor, resource)] += requests[resource]
            assignments.append(
                {
                    "name": pod_set["name"],
                    "flavors": flavors,
                    "resourceUsage": {r: show(a) for r, a in requests.items()},
                    "count": pod_set["count"],
                }
            )
        return assignments, "; ".join(failures)

    def _flavor_for(
        self,
        cq: dict[str, Any],
        pod_set: dict[str, Any],
        resource: str,
        amount: Decimal,
        usage: Usage,
        considered: Usage,
    ) -> tuple[str, str]:
        groups = [
            g for g in cq["spec"].get("resourceGroups") or [] if resource in g["coveredResources"]
        ]
        if not groups:
            return "", f"resource {resource} unavailable in ClusterQueue"
        selector = pod_set["template"]["spec"].get("nodeSelector") or {}
        reasons = []
        for flavor in groups[0]["flavors"]:
            name = flavor["name"]
            if name not in self.flavors:
                reasons.append(f"flavor {name} not found")
                continue
            labels = self.flavors[name]["spec"].get("nodeLabels") or {}
            if any(selector.get(k, v) != v for k, v in labels.items()):
                reasons.append(f"flavor {name} doesn't match node affinity")
                continue
            quota = next((r for r in flavor["resources"] if r["name"] == resource), None)
            nominal = quantity(quota["nominalQuota"]) if quota else Decimal(0)
            before = considered[(name, resource)]
            if before + amount > nominal:
                reasons.append(
                    f"insufficient quota for {resource} in flavor {name}, previously considered "
                    f"podsets requests ({show(before)}) + current podset request ({show(amount)}) "
                    f"> maximum capacity ({show(nominal)})"
                )
                continue
            available = nominal - usage[(name, resource)]
            if before + amount > available:
                more = before + amount - available
                reasons.append(
                    f"insufficient unused quota for {resource} in flavor {name}, {show(more)} more needed"
                )
                continue
            return name, ""
        return "", ", ".join(reasons)

    def _pending(self, wl: dict[str, Any], reason: str, message: str) -> None:
        status = copy.deepcopy(wl.get("status") or {})
        conditions = status.setdefault("conditions", [])
        if stand_in.set_condition(conditions, "QuotaReserved", "False", reason, message):
            self._write_status(wl, status)

    def _write_status(self, wl: dict[str, Any], status: dict[str, Any]) -> None:
        meta = wl["metadata"]
        path = f"{API}/namespaces/{meta['namespace']}/workloads/{meta['name']}/status"
        body = {**wl, "status": status}
        answer = self.kube.request("PUT", path, body)
        wl["metadata"] = answer["metadata"]


def _queue_order(wl: dict[str, Any]) -> tuple[int, str]:
    return (-int(wl["spec"].get("priority", 0)), wl["metadata"]["creationTimestamp"])


def reconcile_all(kube: Kube) -> None:
    try:
        Kueue(kube).run()
    except KubeError as err:
        if err.status != 409:  # a stale read: the next pass sees the new version
            raise


if __name__ == "__main__":
    watched = [
        f"{JOBSET_API}/jobsets",
        f"{API}/workloads",
        f"{API}/clusterqueues",
        f"{API}/localqueues",
        f"{API}/resourceflavors",
    ]
    stand_in.run("kueue", watched, reconcile_all, sys.argv[1:])
