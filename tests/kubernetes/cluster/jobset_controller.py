"""A JobSet controller stand-in for the 1.20 test cluster (``jobset.x-k8s.io/v1alpha2``).

Mirrors kubernetes-sigs/jobset v0.12.0: ``pkg/controllers/jobset_controller.go`` (reconcile,
constructJob, labelAndAnnotateObject, createHeadlessSvcIfNecessary, deleteJobs),
``pkg/controllers/failure_policy.go`` (default action RestartJobSet up to maxRestarts),
``pkg/controllers/success_policy.go``, ``pkg/constants/constants.go`` (reasons, messages) and
``api/jobset/v1alpha2/jobset_types.go`` (label/annotation keys, condition types).

Implemented, as upstream:

* child Jobs ``<jobset>-<replicatedJob>-<jobIndex>``, ``replicas`` per replicatedJob (default
  1), each owned by the JobSet (controller reference: one delete removes Jobs, pods and
  Service through the garbage collector); on the Job and on its pod template the labels and
  annotations ``jobset.sigs.k8s.io/{jobset-name, jobset-uid, replicatedjob-name,
  replicatedjob-replicas, global-replicas, job-index, job-global-index, job-key,
  restart-attempt}``;
* ``spec.network.enableDNSHostnames``: a headless Service named ``subdomain`` (default the
  JobSet's name), selector ``jobset-name``, ``publishNotReadyAddresses`` (default true), owned
  by the JobSet; the pod template gets ``subdomain`` and ``hostname`` =
  ``<job name>-0`` (the hostname the Indexed Job controller gives the only pod of an Indexed
  Job; 1.20 has no Indexed Jobs, so multi-host slices are modelled as ``replicas`` = hosts
  Jobs of one pod each);
* ``spec.suspend``: no Job is created while suspended, condition ``Suspended`` True
  (SuspendedJobs, "jobset is suspended"), False (ResumeJobs, "jobset is resumed") on resume,
  then the Jobs are created from the spec as it is then (Kueue's node selectors included).
  Difference: 1.20 Jobs have no ``spec.suspend``, so suspending a running JobSet deletes its
  Jobs instead of suspending them;
* failure: with no ``failurePolicy`` the first failed Job fails the JobSet (FailedJobs,
  "jobset failed due to one or more job failures (first failed job: X)"); with one, the
  default rule action RestartJobSet: ``status.restarts`` and ``restartsCountTowardsMax`` + 1
  and every Job of the previous attempt deleted (foreground) and recreated with the new
  ``restart-attempt``, until ``maxRestarts``, then Failed (ReachedMaxRestarts, "jobset failed
  due to reaching max number of restarts (first failed job: X)");
* success policy ``All`` (default) or ``Any`` (with ``targetReplicatedJobs``): condition
  ``Completed`` (AllJobsCompleted, "jobset completed successfully"); ``terminalState``;
* a finished JobSet's active Jobs are deleted (foreground), as upstream;
* difference: a Job name whose Job this controller saw being deleted (a restart) is created
  again only ``RECREATE_GAP`` after that Job is gone. Upstream creates it at once; on 1.20
  that loses a race: the Job controller's status update of the old Job conflicts, and its
  retry (``updateJobStatus``) reads the Job again by name and writes the old Job's status,
  Failed included, onto the new one (later Job controllers check the UID);
* ``status.replicatedJobsStatus`` (ready = active Jobs, 1.20 Jobs have no ``status.ready``).

* ``spec.ttlSecondsAfterFinished`` (``pkg/controllers/ttl_after_finished.go``): a finished
  JobSet is deleted, foreground (its Jobs, their pods and its Service go first) with
  preconditions on its uid and resourceVersion, once that many seconds passed since the
  lastTransitionTime of its Completed or Failed condition; unset: kept. Difference:
  upstream requeues for the time left, here the next pass (an event, or the 5 s resync)
  looks again, so a JobSet may live up to a resync longer.

Not implemented: failure policy rules (onJobFailureReasons, RestartJob actions), startupPolicy
InOrder, dependsOn, coordinator, exclusive placement, managedBy,
volumeClaimPolicies, groupName labels, in-place restart, events.
"""

from __future__ import annotations

import calendar
import copy
import hashlib
import sys
import time
from typing import Any

import stand_in
from node_agent import Kube, KubeError

API = "/apis/jobset.x-k8s.io/v1alpha2"
#: Seconds a Job name stays unused once its deleted Job is gone (see the docstring).
RECREATE_GAP = 1.0
#: (namespace, name) of Jobs seen being deleted, not yet created again.
_replaced: set[tuple[str, str]] = set()
PREFIX = "jobset.sigs.k8s.io/"
NAME_KEY = PREFIX + "jobset-name"
RESTARTS_KEY = PREFIX + "restart-attempt"


def _jobs_path(namespace: str) -> str:
    return f"/apis/batch/v1/namespaces/{namespace}/jobs"


def replicas(rjob: dict[str, Any]) -> int:
    return int(rjob.get("replicas", 1))


def job_name(js: dict[str, Any], rjob: dict[str, Any], index: int) -> str:
    return f"{js['metadata']['name']}-{rjob['name']}-{index}"


def dns_hostnames(js: dict[str, Any]) -> bool:
    return bool((js["spec"].get("network") or {}).get("enableDNSHostnames"))


def subdomain(js: dict[str, Any]) -> str:
    return str((js["spec"].get("network") or {}).get("subdomain") or js["metadata"]["name"])


def child_labels(js: dict[str, Any], rjob: dict[str, Any], index: int) -> dict[str, str]:
    """labelAndAnnotateObject: the same keys go to labels and annotations."""
    meta = js["metadata"]
    name = job_name(js, rjob, index)
    offset = 0
    for other in js["spec"]["replicatedJobs"]:
        if other["name"] == rjob["name"]:
            break
        offset += replicas(other)
    return {
        NAME_KEY: meta["name"],
        PREFIX + "jobset-uid": meta["uid"],
        PREFIX + "replicatedjob-name": rjob["name"],
        RESTARTS_KEY: str(js.get("status", {}).get("restarts", 0)),
        PREFIX + "replicatedjob-replicas": str(replicas(rjob)),
        PREFIX + "global-replicas": str(sum(replicas(r) for r in js["spec"]["replicatedJobs"])),
        PREFIX + "job-index": str(index),
        PREFIX + "job-key": hashlib.sha1(f"{meta['namespace']}/{name}".encode()).hexdigest(),
        PREFIX + "job-global-index": str(offset + index),
    }


def _stamp(meta: dict[str, Any], keys: dict[str, str]) -> None:
    meta["labels"] = {**(meta.get("labels") or {}), **keys}
    meta["annotations"] = {**(meta.get("annotations") or {}), **keys}


def construct_job(js: dict[str, Any], rjob: dict[str, Any], index: int) -> dict[str, Any]:
    """constructJob: the replicatedJob's template, labelled, owned, with DNS names."""
    template = copy.deepcopy(rjob["template"])
    keys = child_labels(js, rjob, index)
    meta = {
        "name": job_name(js, rjob, index),
        "namespace": js["metadata"]["namespace"],
        "labels": dict(template.get("metadata", {}).get("labels") or {}),
        "annotations": dict(template.get("metadata", {}).get("annotations") or {}),
        "ownerReferences": [stand_in.owner_reference(js)],
    }
    _stamp(meta, keys)
    spec = template["spec"]
    pod_meta = spec["template"].setdefault("metadata", {})
    _stamp(pod_meta, keys)
    if dns_hostnames(js):
        spec["template"]["spec"]["subdomain"] = subdomain(js)
        spec["template"]["spec"]["hostname"] = f"{meta['name']}-0"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec}


def job_finished(job: dict[str, Any]) -> str:
    """JobFinished: 'Complete', 'Failed' or ''."""
    for kind in ("Complete", "Failed"):
        if stand_in.is_true(job, kind):
            return kind
    return ""


def _delete_jobs(kube: Kube, jobs: list[dict[str, Any]]) -> None:
    """deleteJobs: foreground, skipping Jobs already being deleted."""
    for job in jobs:
        if not job["metadata"].get("deletionTimestamp"):
            meta = job["metadata"]
            stand_in.delete(kube, f"{_jobs_path(meta['namespace'])}/{meta['name']}", "Foreground")


class JobSetReconciler:
    """One pass over one JobSet; collects the status it should have and writes it once."""

    def __init__(self, kube: Kube, js: dict[str, Any], jobs: list[dict[str, Any]]) -> None:
        self.kube = kube
        self.js = js
        self.status = copy.deepcopy(js.get("status") or {})
        self.status.setdefault("restarts", 0)
        self.conditions: list[dict[str, Any]] = self.status.setdefault("conditions", [])
        attempt = str(self.status["restarts"])
        owned = [j for j in jobs if stand_in.owned_by(j, js)]
        self.deleting = [j for j in owned if j["metadata"].get("deletionTimestamp")]
        live = [j for j in owned if not j["metadata"].get("deletionTimestamp")]
        self.previous = [j for j in live if j["metadata"]["labels"].get(RESTARTS_KEY) != attempt]
        self.current = [j for j in live if j["metadata"]["labels"].get(RESTARTS_KEY) == attempt]

    def reconcile(self) -> None:
        if self.finished():
            _delete_jobs(self.kube, [j for j in self.current if not job_finished(j)])
            if self._ttl_expired():
                return
        else:
            _delete_jobs(self.kube, self.previous)
            self._step()
        self._replicated_jobs_status()
        self._write_status()

    def _ttl_expired(self) -> bool:
        """executeTTLAfterFinishedPolicy (``ttl_after_finished.go``): a finished JobSet with
        ``spec.ttlSecondsAfterFinished`` is deleted (foreground, preconditioned on its uid
        and resourceVersion) once that many seconds passed since its Completed or Failed
        condition's lastTransitionTime. Upstream requeues for the time left; here the next
        pass (woken, or the resync) looks again."""
        ttl = self.js["spec"].get("ttlSecondsAfterFinished")
        finished_at = next(
            (
                c.get("lastTransitionTime")
                for c in self.conditions
                if c.get("type") in ("Completed", "Failed") and c.get("status") == "True"
            ),
            None,
        )
        if ttl is None or not finished_at:
            return False
        at = calendar.timegm(time.strptime(finished_at, "%Y-%m-%dT%H:%M:%SZ"))
        if time.time() < at + int(ttl):
            return False
        meta = self.js["metadata"]
        options = {
            "propagationPolicy": "Foreground",
            "preconditions": {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]},
        }
        try:
            self.kube.request(
                "DELETE", f"{API}/namespaces/{meta['namespace']}/jobsets/{meta['name']}", options
            )
        except KubeError as err:
            if err.status not in (404, 409):  # gone, or changed since read: the next pass
                raise
        return True

    def finished(self) -> bool:
        return any(
            stand_in.is_true({"status": self.status}, kind) for kind in ("Completed", "Failed")
        )

    def _step(self) -> None:
        failed = [j for j in self.current if job_finished(j) == "Failed"]
        if failed:
            self._on_failure(sorted(failed, key=_finish_time)[0])
            return
        if self._succeeded():
            self._finish("Completed", "AllJobsCompleted", "jobset completed successfully")
            return
        if self.js["spec"].get("suspend"):
            stand_in.set_condition(
                self.conditions, "Suspended", "True", "SuspendedJobs", "jobset is suspended"
            )
            _delete_jobs(self.kube, [j for j in self.current if not job_finished(j)])
            return
        if stand_in.is_true({"status": self.status}, "Suspended"):
            stand_in.set_condition(
                self.conditions, "Suspended", "False", "ResumeJobs", "jobset is resumed"
            )
        self._create_service()
        self._create_jobs()

    def _on_failure(self, first: dict[str, Any]) -> None:
        """executeFailurePolicy with no rules: fail, or RestartJobSet up to maxRestarts."""
        policy = self.js["spec"].get("failurePolicy")
        name = first["metadata"]["name"]
        if policy is None:
            message = f"jobset failed due to one or more job failures (first failed job: {name})"
            self._finish("Failed", "FailedJobs", message)
        elif self.status.get("restartsCountTowardsMax", 0) >= int(policy.get("maxRestarts", 0)):
            message = (
                f"jobset failed due to reaching max number of restarts (first failed job: {name})"
            )
            self._finish("Failed", "ReachedMaxRestarts", message)
        else:
            self.status["restarts"] += 1
            self.status["restartsCountTowardsMax"] = (
                self.status.get("restartsCountTowardsMax", 0) + 1
            )
            _delete_jobs(self.kube, self.current)

    def _succeeded(self) -> bool:
        """executeSuccessPolicy: All (every Job of the targeted replicatedJobs) or Any."""
        policy = self.js["spec"].get("successPolicy") or {}
        targets = policy.get("targetReplicatedJobs") or [
            r["name"] for r in self.js["spec"]["replicatedJobs"]
        ]
        done = [
            j
            for j in self.current
            if job_finished(j) == "Complete"
            and j["metadata"]["labels"][PREFIX + "replicatedjob-name"] in targets
        ]
        if policy.get("operator") == "Any":
            return bool(done)
        wanted = sum(replicas(r) for r in self.js["spec"]["replicatedJobs"] if r["name"] in targets)
        return len(done) == wanted

    def _finish(self, kind: str, reason: str, message: str) -> None:
        stand_in.set_condition(self.conditions, kind, "True", reason, message)
        self.status["terminalState"] = kind
        _delete_jobs(self.kube, [j for j in self.current if not job_finished(j)])

    def _create_service(self) -> None:
        if not dns_hostnames(self.js):
            return
        meta = self.js["metadata"]
        network = self.js["spec"]["network"]
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": subdomain(self.js),
                "namespace": meta["namespace"],
                "ownerReferences": [stand_in.owner_reference(self.js)],
            },
            "spec": {
                "clusterIP": "None",
                "selector": {NAME_KEY: meta["name"]},
                "publishNotReadyAddresses": network.get("publishNotReadyAddresses", True),
            },
        }
        self._create(f"/api/v1/namespaces/{meta['namespace']}/services", service)

    def _create_jobs(self) -> None:
        namespace = self.js["metadata"]["namespace"]
        _replaced.update((namespace, j["metadata"]["name"]) for j in self.deleting)
        taken = {j["metadata"]["name"] for j in self.current + self.previous + self.deleting}
        missing = [
            (rjob, index)
            for rjob in self.js["spec"]["replicatedJobs"]
            for index in range(replicas(rjob))
            if job_name(self.js, rjob, index) not in taken
        ]
        names = {(namespace, job_name(self.js, rjob, index)) for rjob, index in missing}
        if names & _replaced:
            time.sleep(RECREATE_GAP)  # their old Jobs are gone now: let 1.20 forget them
            _replaced.difference_update(names)
        for rjob, index in missing:
            self._create(_jobs_path(namespace), construct_job(self.js, rjob, index))

    def _create(self, path: str, body: dict[str, Any]) -> None:
        try:
            self.kube.request("POST", path, body)
        except KubeError as err:
            if err.status != 409:  # already there (a previous pass, or still being deleted)
                raise

    def _replicated_jobs_status(self) -> None:
        statuses = []
        for rjob in self.js["spec"]["replicatedJobs"]:
            mine = [
                j
                for j in self.current
                if j["metadata"]["labels"][PREFIX + "replicatedjob-name"] == rjob["name"]
            ]
            active = sum(
                1 for j in mine if not job_finished(j) and j.get("status", {}).get("active")
            )
            statuses.append(
                {
                    "name": rjob["name"],
                    "ready": active,
                    "active": active,
                    "succeeded": sum(1 for j in mine if job_finished(j) == "Complete"),
                    "failed": sum(1 for j in mine if job_finished(j) == "Failed"),
                    "suspended": 0,
                }
            )
        self.status["replicatedJobsStatus"] = statuses

    def _write_status(self) -> None:
        if self.status == self.js.get("status"):
            return
        meta = self.js["metadata"]
        body = {**self.js, "status": self.status}
        self.kube.request(
            "PUT", f"{API}/namespaces/{meta['namespace']}/jobsets/{meta['name']}/status", body
        )


def _finish_time(job: dict[str, Any]) -> str:
    cond = stand_in.find_condition(job, "Failed") or {}
    return str(cond.get("lastTransitionTime", ""))


def reconcile_all(kube: Kube) -> None:
    jobsets = kube.request("GET", f"{API}/jobsets")["items"]
    if not jobsets:
        return
    jobs = kube.request("GET", f"/apis/batch/v1/jobs?labelSelector={NAME_KEY}")["items"]
    for js in jobsets:
        if js["metadata"].get("deletionTimestamp"):
            continue
        try:
            JobSetReconciler(kube, js, jobs).reconcile()
        except KubeError as err:
            if err.status != 409:  # a stale read: the next pass sees the new version
                raise


if __name__ == "__main__":
    stand_in.run("jobset", [f"{API}/jobsets", "/apis/batch/v1/jobs"], reconcile_all, sys.argv[1:])
