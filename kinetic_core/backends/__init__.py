"""Backend protocol: where job processes run. Backends know nothing about payloads or results.

A backend addresses jobs by job id (names derive from it deterministically), so a
handle read from storage is all any process needs to observe or cancel a job. Each
backend is a package below this one, listed by name in ``kinetic_core.registry``; a
failure to reach the backend's service surfaces as ``BackendError``, never as a foreign
library's exception.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from kinetic_core import registry

if TYPE_CHECKING:  # not at run time: the local supervisor imports this package at every job start
    from kinetic_core.config import Target

Phase = Literal["pending", "running", "exited", "gone", "not_found"]


@dataclass(frozen=True)
class LaunchSpec:
    """Everything a backend needs to start the runner for one job."""

    job_id: str
    storage_uri: str
    target: Target  # resolved; may carry the signing key, which must reach the runner as a secret
    labels: dict[str, str] = field(default_factory=dict)
    python_path: list[str] = field(default_factory=list)  # local backend: the submitter's sys.path
    workdir: str | None = None  # local backend: the submitter's working directory
    fuse_volumes: dict[str, str] = field(default_factory=dict)  # mount path -> gs:// (GKE FUSE)

    def runner_args(self) -> list[str]:
        return ["-m", "kinetic_core.runner", "--storage", self.storage_uri, "--job-id", self.job_id]


@dataclass(frozen=True)
class BackendState:
    """What the backend alone knows. ``status.py`` combines it with storage evidence.

    ``exited``: the process ended (``exit_code`` set); ``gone``: it was known and vanished
    without an exit record; ``not_found``: the backend never heard of it (or it was deleted).
    """

    phase: Phase
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    started_at: float | None = None
    finished_at: float | None = None


@runtime_checkable
class Backend(Protocol):
    """What every backend does. Optional methods, looked up with ``getattr`` (a backend
    without one behaves as if it always agreed):

    - ``check_launch(spec) -> None``: refuse a launch before anything is written (a bad
      option: ``ConfigError``).
    - ``check_cancel(job_id) -> None``: raise (``PermissionDenied``...) when ``cancel``
      would be refused, without stopping anything; ``JobHandle.cancel`` records a cancel
      only after this passed.
    - ``driver_overlay(env) -> dict``: Target fields a batch driver running inside this
      backend (``env``: its environment) uses to reach the backend instead of the
      submitter's (a Kubernetes pod: its service account, ``in_cluster``); ``{}`` if none.
    """

    name: str

    @property
    def scope(self) -> str:
        """Identity for bulk polling: jobs with one scope are polled in one call."""

    def launch(self, spec: LaunchSpec) -> None:
        """Start the job. Idempotent for a job id: launching twice starts it once."""

    def poll(self, job_ids: list[str]) -> dict[str, BackendState]:
        """State of many jobs in one bulk call (one scan / one LIST)."""

    def logs(self, job_id: str, tail: int | None = None) -> str:
        """The job's output, or its last ``tail`` lines."""

    def read_logs(self, job_id: str, cursor: str | None) -> tuple[str, str | None]:
        """Output produced after ``cursor`` (None: from the start) and the next cursor.

        Reads a bounded chunk per call so following a huge log uses bounded memory.
        """

    def cancel(self, job_id: str) -> None:
        """Stop the job; unknown or finished jobs are fine."""

    def delete(self, job_id: str) -> None:
        """Remove backend records (processes, Jobs, log files); absent is fine."""

    def sleep_until_change(self, job_ids: list[str], timeout: float) -> None:
        """Sleep up to ``timeout`` seconds; a backend may return early when one of the jobs
        may have changed (the caller polls next either way)."""


_backends: dict[str, Backend] = {}
_lock = threading.Lock()


def get_backend(target: Target) -> Backend:
    """The backend for a resolved target, cached per process and configuration."""
    key = "|".join(
        str(getattr(target, f))
        for f in (
            "backend",
            "storage",
            "local_dir",
            "kube_context",
            "kubeconfig",
            "in_cluster",
            "namespace",
            "project",
            "signing_key",  # the local backend verifies its launch records with it
        )
    )
    with _lock:
        if key not in _backends:
            _backends[key] = registry.backend_factory(str(target.backend))(target)
        return _backends[key]
