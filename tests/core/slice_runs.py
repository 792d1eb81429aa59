"""A multi-host job run by hand: its handle as a JobSet launch records it (a 4-host TPU
slice), each worker's real runner started as its pod would (``python -m
kinetic_core.runtime.runner`` with the manifest's env), and a backend that runs nothing and reads
each worker's log from its stream in storage (as the Kubernetes backend once the pod is
gone). Shared by the core, Airflow and Prefect tests of multi-host jobs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.backends import PlainKind
from kinetic_core.backends.kubernetes import KIND as KUBERNETES_KIND
from kinetic_core.backends.kubernetes.pod_logs import JobLog
from kinetic_core.jobs.handle import load_handle
from kinetic_core.records import layout
from kinetic_core.storage import open_storage
from kinetic_core.util import registry
from tests.core import scripted_backend, workerfns

ROOT = Path(__file__).resolve().parents[2]
COUNT = 4
HOSTS = [f"kjob-workers-{i}-0.kjob" for i in range(COUNT)]
SLICE = "tpu-v5e-16"  # 4 hosts x 4 chips


def start_worker(storage_uri: str, job_id: str, index: int) -> subprocess.Popen[str]:
    """Worker ``index``'s runner with the env of its pod (manifest interface point 1)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KINETIC_", "TPU_"))}
    env.update(
        KINETIC_WORKER_INDEX=str(index),
        KINETIC_WORKER_COUNT=str(COUNT),
        KINETIC_WORKER_HOSTNAMES=",".join(HOSTS),
        KINETIC_COORDINATOR_ADDRESS=f"{HOSTS[0]}:8476",
        KINETIC_LOG_TO_STORAGE="1",  # stdout is a pipe, as a pod's: its log kept in storage
        KINETIC_LOG_FLUSH_SECONDS="0.2",
    )
    argv = [sys.executable, "-m", "kinetic_core.runtime.runner", "--storage", storage_uri]
    return subprocess.Popen(
        [*argv, "--job-id", job_id],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=120)
    return proc.returncode, out


def submit(barrier: Path, fail_on: int = -1, hold: str = "", held: int = 0) -> kc.JobHandle:
    """A job on a 4-host TPU slice, launched nowhere (the scripted backend): the test
    starts its workers' runners itself."""
    barrier.mkdir()
    job = kc.submit(
        workerfns.rendezvous,
        (str(barrier), fail_on, 3, hold, held),
        target={"backend": scripted_backend.NAME},
    )
    return as_slice(job)


def as_slice(job: kc.JobHandle) -> kc.JobHandle:
    """The job's handle as a JobSet launch records it: on a 4-host slice. (No other
    backend runs a multi-host job but Kubernetes: a plain kind refuses multi-host shapes.)"""
    storage = open_storage(job.target["storage"])
    key = layout.job_file(job.job_id, layout.HANDLE)
    data = json.loads(storage.read_bytes(key))
    data["target"]["accelerator"] = SLICE
    storage.write_bytes(key, json.dumps(data).encode())
    return load_handle(storage, job.job_id)


class StoredLogs(scripted_backend.ScriptedBackend):
    """Runs nothing (the test starts the runners); reads each worker's log as the
    Kubernetes backend does once the worker's pod is gone: from its stream in storage."""

    def _log(self, job_id: str, worker: int | None) -> JobLog:
        return JobLog(
            open_storage(self.target.storage),
            job_id,
            pods=list,
            pod_log=lambda pod, **query: None,
            worker=worker or 0,
        )

    def logs(self, job_id: str, tail: int | None = None, worker: int | None = None) -> str:
        return self._log(job_id, worker).text(tail)

    def read_logs(
        self, job_id: str, cursor: str | None, worker: int | None = None
    ) -> tuple[str, str | None]:
        return self._log(job_id, worker).read(cursor)

    def log_complete(self, job_id: str, worker: int | None = None) -> bool:
        return self._log(job_id, worker).complete()


class SliceKind(PlainKind):
    """Runs nothing itself; a job's hosts are a TPU slice's, as the Kubernetes kind says."""

    shape = staticmethod(KUBERNETES_KIND.shape)


KIND = SliceKind(StoredLogs)


def register(monkeypatch: pytest.MonkeyPatch) -> None:
    """``backend="scripted"`` is ``StoredLogs`` for this test."""
    scripted_backend.register(monkeypatch)
    monkeypatch.setitem(registry.BACKENDS, scripted_backend.NAME, f"{__name__}:KIND")


def lines_of(k: int) -> list[str]:
    return [f"line {i} of worker {k}" for i in range(3)]


def run_slice(storage_uri: str, tmp_path: Path) -> kc.JobHandle:
    """A 4-worker job run to its end; each worker's stream written by its real runner."""
    job = submit(tmp_path / "barrier")
    procs = [start_worker(storage_uri, job.job_id, k) for k in range(COUNT)]
    assert [finish(p)[0] for p in procs] == [0] * COUNT
    return job
