"""Backend protocol: where job processes run. Backends know nothing about payloads or results.

A backend addresses jobs by job id (names derive from it deterministically), so a
handle read from storage is all any process needs to observe or cancel a job. Each
backend is a package below this one exposing its ``BackendKind`` (what differs between
backends, asked without a connection), listed by name in ``kinetic_core.util.registry``; a
failure to reach the backend's service surfaces as ``BackendError``, never as a foreign
library's exception.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from kinetic_core.util import registry

if TYPE_CHECKING:  # not at run time: the local supervisor imports this package at every job start
    from kinetic_core.config.target import Target

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
        return [
            "-m",
            "kinetic_core.runtime.runner",
            "--storage",
            self.storage_uri,
            "--job-id",
            self.job_id,
        ]


@dataclass(frozen=True)
class BackendState:
    """What the backend alone knows. ``status.py`` combines it with storage evidence.

    ``exited``: the process ended (``exit_code`` set); ``gone``: it was known and vanished
    without an exit record; ``not_found``: the backend never heard of it (or it was deleted).
    ``ran``: False when the backend knows the job's runner was never started (a launch it
    abandoned); None when it cannot say (the runner's started record is the evidence).
    """

    phase: Phase
    exit_code: int | None = None
    reason: str | None = None
    message: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    ran: bool | None = None


def running(state: BackendState) -> bool:
    """The backend still runs (or will run) a process of the job."""
    return state.phase in ("pending", "running")


@runtime_checkable
class Backend(Protocol):
    """What every backend does. Optional methods, looked up with ``getattr`` (a backend
    without one behaves as if it always agreed):

    - ``check_launch(spec) -> None``: refuse a launch before anything is written (a bad
      option: ``ConfigError``).
    - ``check_cancel(job_id) -> None``: raise (``PermissionDenied``...) when ``cancel``
      would be refused, without stopping anything; ``JobHandle.cancel`` records a cancel
      only after this passed.
    - ``port_forward(job_id, ports, worker) -> PortForward``: local ports to the running
      job's ports (``kinetic_core.util.ports``); without it ``JobHandle.port_forward`` is a
      ConfigError naming the backend.
    - ``on_change(listener) -> None``: call ``listener(job_id)`` (from any thread; it only
      schedules work) when the backend sees a job change; the async shared poller then
      polls that job at once (Kubernetes: its watch events).
    - ``log_complete(job_id, worker) -> bool``: no more output will be written to the
      job's (``worker``'s) log. A log stream at a job's end keeps reading a worker's log
      until it is (a bounded time): another worker's process may still be writing after
      the job read SUCCEEDED. Without it, a log is complete once the job is terminal.
    - ``decided_by_storage: bool`` (an attribute): a job whose runner decided its outcome
      is resolved from storage alone, without a poll (Kubernetes: the pod ends on its
      own, and a poll is API requests). Without it the backend is polled all the same
      (local: a job reads terminal only once its processes are gone).
    """

    name: str

    @property
    def scope(self) -> str:
        """Identity for bulk polling: jobs with one scope are polled in one call."""

    def launch(self, spec: LaunchSpec) -> None:
        """Start the job. Idempotent for a job id: launching twice starts it once."""

    def poll(self, job_ids: list[str]) -> dict[str, BackendState]:
        """State of many jobs in one bulk call (one scan / one LIST)."""

    def logs(self, job_id: str, tail: int | None = None, worker: int | None = None) -> str:
        """The job's output, or its last ``tail`` lines. ``worker``: one worker's of a
        multi-host job (only asked of a backend that runs those; None: the job's one log)."""

    def read_logs(
        self, job_id: str, cursor: str | None, worker: int | None = None
    ) -> tuple[str, str | None]:
        """Output produced after ``cursor`` (None: from the start) and the next cursor.

        Reads a bounded chunk per call so following a huge log uses bounded memory.
        ``worker`` as in ``logs``.
        """

    def cancel(self, job_id: str) -> None:
        """Stop the job; unknown or finished jobs are fine."""

    def delete(self, job_id: str) -> None:
        """Remove backend records (processes, Jobs, log files); absent is fine."""

    def sleep_until_change(self, job_ids: list[str], timeout: float) -> None:
        """Sleep up to ``timeout`` seconds; a backend may return early when one of the jobs
        may have changed (the caller polls next either way)."""


@runtime_checkable
class BackendKind(Protocol):
    """What the core asks of a backend without a connection or a foreign library: one per
    backend package (its ``KIND``), registered by name in ``kinetic_core.util.registry``. The
    core never compares backend names; it asks the kind."""

    @property
    def options(self) -> frozenset[str]:
        """The ``Target`` fields this backend owns (checked by ``check_options``)."""

    @property
    def supports_volumes(self) -> bool:
        """Whether a job can see ``Data`` at a mount path (``volumes=``)."""

    def create(self, target: Target) -> Backend:
        """The backend for a resolved target; a missing extra is a ConfigError naming it."""

    def cache_key(self, target: Target) -> tuple[object, ...]:
        """What makes two backends of this kind differ. Called at every ``get_backend``, so
        it may key on what the environment holds at that moment."""

    def check_options(self, target: Target) -> None:
        """ConfigError naming the option when one of ``options`` that is set is malformed."""

    def job_object_name(self, job_id: str) -> str | None:
        """The name of the object the job runs as in the backend's API, if it has one."""

    def links(self, job_id: str, target: Mapping[str, Any]) -> dict[str, str]:
        """``{kind: url}`` of the job's pages in the backend's consoles (see ``links.py``)."""

    def driver_overlay(self, target: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
        """Target fields a batch driver running where ``env`` says overrides (credentials)."""

    def shape(self, target: Mapping[str, Any]) -> Shape:
        """The hosts and chips a job of ``target`` (a stored target: plain data) runs on.
        Never raises: an accelerator this version does not know has 0 chips."""


@dataclass(frozen=True)
class Shape:
    """What one job runs on: its hosts (one worker and one log each) and the accelerator
    chips over all of them (0: none, or a name this version does not know)."""

    hosts: int = 1
    chips: int = 0


def hosts_asked(target: Mapping[str, Any]) -> int:
    """``num_hosts`` when it is a whole number > 1, else 1 (what any kind starts from)."""
    hosts = target.get("num_hosts")
    return hosts if isinstance(hosts, int) and not isinstance(hosts, bool) and hosts > 1 else 1


def shape_of(target: Mapping[str, Any]) -> Shape:
    """The shape of a job of ``target`` (a stored target), asked of its backend's kind."""
    kind: BackendKind = registry.backend_kind(target.get("backend"))
    return kind.shape(target)


class PlainKind:
    """The kind of a backend with no options, consoles or driver overlay, made by
    ``factory(target)`` and cached per storage root. Backends that say more subclass it."""

    options: frozenset[str] = frozenset()
    supports_volumes = False

    def __init__(self, factory: Callable[[Target], Any] | None = None) -> None:
        self._factory = factory

    def create(self, target: Target) -> Backend:
        if self._factory is None:
            raise NotImplementedError(f"{type(self).__name__} names no backend factory")
        backend: Backend = self._factory(target)
        return backend

    def cache_key(self, target: Target) -> tuple[object, ...]:
        return (target.storage,)

    def check_options(self, target: Target) -> None:
        """Nothing to refuse before the backend is used."""

    def job_object_name(self, job_id: str) -> str | None:
        return None

    def links(self, job_id: str, target: Mapping[str, Any]) -> dict[str, str]:
        return {}

    def driver_overlay(self, target: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
        return {}

    def shape(self, target: Mapping[str, Any]) -> Shape:
        return Shape(hosts=hosts_asked(target))


_backends: dict[tuple[object, ...], Backend] = {}
_lock = threading.Lock()


def cache_key(target: Target) -> tuple[object, ...]:
    """What ``get_backend`` caches the backend of ``target`` under: its name and what its
    kind says makes two instances differ."""
    return (str(target.backend), *registry.backend_kind(target.backend).cache_key(target))


def get_backend(target: Target) -> Backend:
    """The backend for a resolved target, cached per process under ``cache_key``."""
    key = cache_key(target)
    with _lock:
        if key not in _backends:
            _backends[key] = registry.backend_kind(target.backend).create(target)
        return _backends[key]
