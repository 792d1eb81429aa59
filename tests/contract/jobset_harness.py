"""The Kubernetes backend's multi-host variant under the contract: a gang of 2 workers.

A job of ``num_hosts=2`` (no accelerator: two CPU hosts of the test cluster) is ONE JobSet
(``jobset.x-k8s.io/v1alpha2``, made by the cluster's JobSet controller stand-in) whose 2
child Jobs run one pod each; the contract function runs on both workers. So:

* an execution is a gang, not a pod: the live pods of one launch, grouped by the JobSet
  (its uid) and its restart attempt, both of which JobSet stamps on every worker pod; two
  launches of one job id would be two JobSets (two uids), a JobSet restart two attempts;
* the top-level object is the JobSet; the records are the JobSet, its child Jobs, their
  pods, its headless Service and the job's Secret;
* a run of the job is a run of worker 0 (``Held.count``; every worker records its runs);
* the orphaning fault is ``kubectl delete jobset --cascade=orphan``: the JobSet goes, its
  Jobs and their pods run on; the network faults are the Job harness's, through the same
  ``TcpProxy``, with the lost answer being the JobSet create's (about twice a Job's).

Everything else (cluster, proxy, kubeconfig, the official client the harness reads and
deletes with) is ``KubernetesHarness``'s.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from kubernetes import client

import kinetic_core as kc
from kinetic_core.backends.kubernetes import job_name
from kinetic_core.backends.kubernetes.jobset import GROUP, VERSION
from tests.contract.harness import until
from tests.contract.kubernetes_harness import FINISHED, LABEL, NAMESPACE, KubernetesHarness

WORKERS = 2
# A JobSet create carries the Job's pod template inside a replicatedJob, the worker
# environment and the JobSet's own fields: 2528 bytes on the wire (measured; a Job's about
# 1300), the Secret create that follows it 801, the reads of a launch under 400.
JOBSET_CREATE_BYTES = 1800
PREFIX = "jobset.sigs.k8s.io/"
JOBSET_UID = PREFIX + "jobset-uid"
RESTART_ATTEMPT = PREFIX + "restart-attempt"
JOB_INDEX = PREFIX + "job-index"


class JobSetHarness(KubernetesHarness):
    name = "jobset"
    top_kind = "JobSet"
    create_bytes = JOBSET_CREATE_BYTES

    def setup(self, request: pytest.FixtureRequest, mp: pytest.MonkeyPatch) -> kc.Target:
        target = super().setup(request, mp)
        self.custom = client.CustomObjectsApi(self.api)
        return target.merge({"num_hosts": WORKERS})

    # ---- what is there ------------------------------------------------------------------
    def _jobsets(self, job_id: str) -> list[dict[str, Any]]:
        found = self.custom.list_namespaced_custom_object(
            GROUP, VERSION, NAMESPACE, "jobsets", label_selector=f"{LABEL}={job_id}"
        )
        return list(found["items"])

    def executions(self, job_id: str) -> list[str]:
        """One per launch: the live worker pods of one JobSet attempt, as one entry."""
        gangs: dict[tuple[str, str], list[str]] = {}
        for pod in self._pods(job_id):
            if pod.status.phase in FINISHED:
                continue
            labels = pod.metadata.labels or {}
            key = (labels.get(JOBSET_UID, "?"), labels.get(RESTART_ATTEMPT, "?"))
            gangs.setdefault(key, []).append(f"worker {labels.get(JOB_INDEX, '?')}")
        return sorted(
            f"gang of JobSet uid {uid[:8]} attempt {attempt} ({', '.join(sorted(workers))})"
            for (uid, attempt), workers in gangs.items()
        )

    def tops(self, job_id: str) -> list[str]:
        return sorted(f"JobSet {s['metadata']['name']}" for s in self._jobsets(job_id))

    def records(self, job_id: str) -> list[str]:
        found = [f"JobSet {s['metadata']['name']}" for s in self._jobsets(job_id)]
        services = self.core.list_namespaced_service(NAMESPACE).items
        found += [
            f"Service {s.metadata.name}" for s in services if s.metadata.name == job_name(job_id)
        ]
        return sorted(found + super().records(job_id))

    # ---- faults -------------------------------------------------------------------------
    def orphan(self, job_id: str) -> None:
        """``kubectl delete jobset --cascade=orphan``: the JobSet goes, its Jobs and their
        pods run on."""
        self.custom.delete_namespaced_custom_object(
            GROUP,
            VERSION,
            NAMESPACE,
            "jobsets",
            job_name(job_id),
            body=client.V1DeleteOptions(propagation_policy="Orphan"),
        )
        until(f"JobSet {job_name(job_id)} to go", lambda: not self._jobsets(job_id))

    # ---- teardown -----------------------------------------------------------------------
    def cleanup(self) -> None:
        """The JobSets first (else the controller makes their Jobs again), then what the
        Job harness removes, and the Services an orphaning deletion left."""
        for job_id in self.job_ids:
            self.custom.delete_collection_namespaced_custom_object(
                GROUP,
                VERSION,
                NAMESPACE,
                "jobsets",
                label_selector=f"{LABEL}={job_id}",
                propagation_policy="Background",
            )
            with contextlib.suppress(client.ApiException):  # 1.20 answers a Status, raw
                self.core.delete_namespaced_service(
                    job_name(job_id), NAMESPACE, _preload_content=False
                )
        super().cleanup()
