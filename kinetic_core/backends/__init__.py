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

#: Exit code of a runner that will not run the job's function: another process of the job
#: ran it or may still run it (a replacement pod, an attempt superseded or not yet due). A
#: backend never reads such a process as the job's end while another process of it lives.
REFUSED_EXIT_CODE = 117


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


def running(state: BackendState) -> bool:
    """The backend still runs (or will run) a process of the job."""
    return state.phase in ("pending", "running")


@runtime_checkable
class Backend(Protocol):
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


#: What a backend is cached on unless its class declares ``cache_key`` (see ``cache_key``).
DEFAULT_CACHE_FIELDS = (
    "backend",
    "storage",
    "local_dir",
    "kube_context",
    "kubeconfig",
    "in_cluster",
    "namespace",
    "project",
    "signing_key",
)

_backends: dict[tuple[object, ...], Backend] = {}
_lock = threading.Lock()


def cache_key(target: Target) -> tuple[object, ...]:
    """What ``get_backend`` caches the backend of ``target`` under.

    What makes two backend instances differ is the backend's to say: a backend class
    may declare ``cache_key(target) -> tuple`` (a classmethod or staticmethod of the class
    behind the registry's factory; nothing is instantiated to find it). It is called at
    every ``get_backend``, so it can key on what the environment holds at that moment (the
    local backend keys on the signing key in force). The key starts with the registry's
    entry, so names registered to one factory (``gke``, ``kubernetes``) share instances
    exactly when their declared keys are equal. Default: ``DEFAULT_CACHE_FIELDS``.
    """
    name = str(target.backend)
    factory = registry.backend_factory(name)
    declared = getattr(getattr(factory, "__self__", factory), "cache_key", None)
    fields = declared(target) if declared else (getattr(target, f) for f in DEFAULT_CACHE_FIELDS)
    return (registry.BACKENDS[name], *fields)


def get_backend(target: Target) -> Backend:
    """The backend for a resolved target, cached per process under ``cache_key``."""
    key = cache_key(target)
    with _lock:
        if key not in _backends:
            _backends[key] = registry.backend_factory(str(target.backend))(target)
        return _backends[key]
