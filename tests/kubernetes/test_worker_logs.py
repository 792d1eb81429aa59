"""The Kubernetes backend reads worker k's log from the pod labelled with its JobSet index
(``jobset.sigs.k8s.io/job-index=k``) among the job's pods: worker pods made by hand here,
as the JobSet controller makes them (the multi-host launch itself is slice-backend's)."""

from __future__ import annotations

import uuid
from typing import Any

import kinetic_core as kc
from kinetic_core.backends.kubernetes import KubernetesBackend
from kinetic_core.backends.kubernetes.backend import WORKER_INDEX_LABEL
from kinetic_core.backends.kubernetes.pod_spec import KINETIC_CONTAINER
from kinetic_core.polling import poll_ticks


def worker_pod(job_id: str, index: int) -> dict[str, Any]:
    code = f"for i in range(3): print(f'line {{i}} of pod {index}', flush=True)"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job_id}-workers-{index}-0",
            "labels": {"app": "kinetic", "kinetic/job-id": job_id, WORKER_INDEX_LABEL: str(index)},
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {"name": KINETIC_CONTAINER, "image": "python", "command": ["python", "-c", code]}
            ],
        },
    }


def test_each_workers_log_comes_from_its_own_pod(kube: kc.Target) -> None:
    backend = KubernetesBackend(kube.resolve())
    job_id = f"slice-{uuid.uuid4().hex[:8]}"
    for index in (0, 1, 2):
        backend.client.call("POST", backend.client.ns("pods"), body=worker_pod(job_id, index))
    try:
        for _ in poll_ticks(interval=0.25, timeout=90, describe=lambda: "the pods' logs"):
            if all(backend.logs(job_id, worker=k).count("\n") == 3 for k in (0, 1, 2)):
                break
        for k in (0, 1, 2):
            expected = "".join(f"line {i} of pod {k}\n" for i in range(3))
            assert backend.logs(job_id, worker=k) == expected
            text, cursor = backend.read_logs(job_id, None, worker=k)
            assert text == expected
            assert backend.read_logs(job_id, cursor, worker=k)[0] == ""  # nothing twice
        assert backend.logs(job_id, tail=1, worker=2) == "line 2 of pod 2\n"
    finally:
        backend.client.call(
            "DELETE",
            backend.client.ns("pods"),
            query={"labelSelector": f"kinetic/job-id={job_id}"},
        )
