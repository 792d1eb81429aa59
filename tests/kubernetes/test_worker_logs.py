"""Multi-host jobs end to end on the test cluster: the backend reads worker k's log from the
pod labelled with its JobSet index (``jobset.sigs.k8s.io/job-index=k``; pods made by hand
first), and a real JobSet slice runs the runner per worker: ranks, every worker's log
prefixed or one worker's, a failing worker named with its own log tail."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

import kinetic_core as kc
from kinetic_core.backends.kubernetes import KubernetesBackend
from kinetic_core.backends.kubernetes.backend import WORKER_INDEX_LABEL
from kinetic_core.backends.kubernetes.pod_spec import KINETIC_CONTAINER
from kinetic_core.control.polling import poll_ticks
from tests.core import workerfns


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


# ---- a real multi-host job (JobSet on the test cluster's 4-host v5e slice) ---------------
def _slice(kube: kc.Target) -> kc.Target:
    return kube.merge(
        {"accelerator": "tpu-v5e-16", "pickle_by_value": ["k8s_fns", "tests.core.workerfns"]}
    )


def test_a_slice_runs_every_worker_with_its_rank_and_shows_every_workers_log(
    kube: kc.Target, tmp_path: Path
) -> None:
    job = kc.submit(workerfns.rendezvous, (str(tmp_path),), target=_slice(kube))
    seen = job.result(timeout=180, cleanup=False)
    assert (seen["index"], seen["TPU_WORKER_ID"], seen["RANK"], seen["WORLD_SIZE"]) == (
        0,
        "0",
        "0",
        "4",
    )
    # SUCCEEDED is worker 0's decision: another worker may still print. A stream ends
    # once every worker's log is complete; logs() is a snapshot, read after it.
    prefixed = [x for x in job.follow_logs(timeout=60) if " line " in x]
    assert sorted(prefixed) == sorted(
        f"[w{k}] line {i} of worker {k}" for k in range(4) for i in range(3)
    )
    for k in range(4):  # each worker's log: its own pod, then its own stream
        expected = [f"line {i} of worker {k}" for i in range(3)]
        assert [x for x in job.logs(worker=k).splitlines() if x.startswith("line ")] == expected


def test_a_failing_worker_of_a_slice_is_named_with_its_own_log_tail(
    kube: kc.Target, tmp_path: Path
) -> None:
    never = str(tmp_path / "never")  # worker 0 waits: JobSet stops it once worker 2 failed
    job = kc.submit(workerfns.rendezvous, (str(tmp_path), 2, 3, never), target=_slice(kube))
    with pytest.raises(ValueError, match="boom on worker 2") as caught:
        job.result(timeout=180)
    text = kc.describe_failure(job, caught.value)
    assert "failed on worker 2" in text and "worker 2: ValueError: boom on worker 2" in text
    tail = text.partition("--- last 50 log lines of")[2]
    assert tail.startswith(f" {job.job_id} worker 2 ---") and "line 2 of worker 2" in tail
    assert "of worker 1" not in tail
