"""JobHandle: a durable reference to one job; ``attach`` finds it again (``list_jobs``:
``kinetic_core.jobs.listing``).

A JobHandle is small JSON-serializable data: everything needed to observe, collect and
clean up a job from any machine, and nothing else (no function, no secret values).
Every method that waits or does I/O has an async twin named with an ``a`` prefix
(``wait``/``await_``: ``await`` is a keyword); twins share one implementation.
"""

from __future__ import annotations

import _thread
import dataclasses
import functools
import json
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from kinetic_core.backends import Backend, BackendKind, BackendState, running
from kinetic_core.config.target import Target
from kinetic_core.control import recovery
from kinetic_core.control.logs import (
    LogStream,
    check_worker,
    is_merged,
    prefixed,
    read_merged,
    workers_of,
)
from kinetic_core.control.polling import (
    OnStatusChange,
    StatusChanges,
    Until,
    poll_ticks,
    shared_poller,
    wait_states,
)
from kinetic_core.control.resolution import backend_for, resolve_states
from kinetic_core.control.usage import Usage, job_usage
from kinetic_core.data.inputs import Data
from kinetic_core.data.outputs import delete_outputs, download_outputs, output_dir_of, outputs_uri
from kinetic_core.errors import (
    ConfigError,
    CorruptRecord,
    JobCancelled,
    JobFailed,
    JobNotFound,
    JobNotRunning,
    JobStillRunning,
    KineticError,
    ResultNotAvailable,
    WaitTimeout,
)
from kinetic_core.records import layout
from kinetic_core.records.envelope import load_envelope, rebuild_exception
from kinetic_core.records.history import Transition, transitions
from kinetic_core.records.lifecycle import decide, read_outcome, try_write_record
from kinetic_core.records.preview import Preview, shown
from kinetic_core.runtime import debugging, signals, telemetry
from kinetic_core.states import JobState, JobStatus, Reason
from kinetic_core.storage import Storage, open_storage
from kinetic_core.util import registry, signing
from kinetic_core.util.ids import validate_id
from kinetic_core.util.ports import PortForward, parse_ports
from kinetic_core.util.seed_names import old_keywords, said
from kinetic_core.util.waits import aticks, in_thread

__all__ = ["JobHandle", "attach", "load_handle"]

log = logging.getLogger(__name__)

HANDLE_VERSION = 1
#: The tags a batch child's handle carries (``batch/records.py`` writes them).
BATCH_GROUP_TAG = "kinetic/group-id"
BATCH_INDEX_TAG = "kinetic/index"
#: Where a Kubernetes job runs when its target names no namespace (as the client does).
KUBERNETES_DEFAULT_NAMESPACE = "default"
#: How long ``cancel()`` waits by default for the job's processes to stop.
CANCEL_WAIT = 30.0
#: How long ``result()`` waits by default for the cleanup after a success (it stops the
#: job's processes, bounded by ``CANCEL_WAIT``, and deletes its backend objects): past it
#: the value is returned and the rest is left to ``kinetic jobs cleanup``.
CLEANUP_TIMEOUT = CANCEL_WAIT


@dataclass(frozen=True)
class JobHandle:
    """A durable reference to one job. ``to_json()`` it anywhere; ``from_json`` to reattach.

    ``signing_key`` is never serialized: a process that loads a handle verifies
    envelopes with the key it was given, else ``KINETIC_SIGNING_KEY``.
    """

    job_id: str
    storage: str
    target: dict[str, Any]
    name: str = ""
    created_at: float = 0.0
    attempt: int = 1
    idempotency_key: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    version: int = HANDLE_VERSION
    #: Set on an attempt started by a recovery (see ``kinetic_core.control.recovery``).
    recoveries: int = 0
    lost_seconds: float = 0.0
    recovered_from: str | None = None
    #: Who submitted it (``owner=``, ``KINETIC_OWNER``, else the login) and a free-text
    #: note (``description=``): what ``list_jobs(owner=...)`` and the CLI show.
    owner: str = ""
    description: str = ""
    #: Pinned by the user (``keep=True`` on submit): ``kinetic gc`` never removes it.
    keep: bool = False
    #: Which call the job runs (``jobs/fingerprint.py``: the function's name and a digest
    #: of the arguments, never a value): a keyed submit of another call is told so. Empty
    #: on handles written before it existed, and on batch children.
    call_fingerprint: str = ""
    signing_key: str | None = field(default=None, repr=False, compare=False)
    #: True when ``submit`` returned this existing job for its idempotency key instead of
    #: creating one (a retry reattached). Not serialized.
    reattached: bool = field(default=False, compare=False)

    # ---- serialization --------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        del data["signing_key"], data["reattached"]
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def record(self) -> bytes:
        """What ``handle.json`` holds: ``to_dict()``, signed (``hmac``) when a signing key
        is set, so a reader with the key refuses an edited or forged handle."""
        data = self.to_dict()
        if self._key:
            data["hmac"] = signing.mac(self._key, data)
        return json.dumps(data, sort_keys=True).encode()

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, signing_key: str | None = None) -> JobHandle:
        """Load a handle; keys this version does not know are ignored (newer writers)."""
        known = {f.name for f in fields(cls)} - {"signing_key", "reattached"}
        kwargs = {k: v for k, v in data.items() if k in known}
        validate_id(kwargs.get("job_id", ""))
        return cls(**kwargs, signing_key=signing_key)

    @classmethod
    def from_json(cls, text: str, *, signing_key: str | None = None) -> JobHandle:
        return cls.from_dict(json.loads(text), signing_key=signing_key)

    # ---- plumbing -------------------------------------------------------------------------
    @property
    def _key(self) -> str | None:
        return self.signing_key or os.environ.get("KINETIC_SIGNING_KEY") or None

    def _storage(self) -> Storage:
        return open_storage(self.storage)

    @functools.cached_property
    def target_key(self) -> str:
        """The stored target as one string, computed once: status resolution groups the
        jobs it polls by it (a shared poller asks thousands of times a second)."""
        return json.dumps(self.target, sort_keys=True, default=repr)

    def _path(self, name: str) -> str:
        return layout.job_file(self.job_id, name)

    @property
    def output_dir(self) -> str:
        """Where the job's synced outputs live in storage: a path for file:// storage, a
        URI otherwise (inside the job, KINETIC_OUTPUT_DIR is a local folder synced here);
        ``{output_dir}/{job_id}`` when the job was given an ``output_dir``."""
        return output_dir_of(self.storage, self.job_id, self.target.get("output_dir"))

    @property
    def outputs(self) -> Data:
        """The job's synced output folder as a ``Data``: pass it to the next job, which
        reads it as a local folder (``train.run_async(prepare.outputs)``)."""
        return Data(outputs_uri(self._storage(), self.job_id, self.target.get("output_dir")))

    def download_outputs(self, dest: str | os.PathLike[str]) -> str:
        """Copy the job's synced outputs into the local folder ``dest``; return its path."""
        where = self.target.get("output_dir")
        return download_outputs(self._storage(), self.job_id, os.fspath(dest), where)

    async def adownload_outputs(self, dest: str | os.PathLike[str]) -> str:
        return await in_thread(self.download_outputs)(dest)

    @property
    def location(self) -> str:
        """URI of the job's folder in storage (for links and people)."""
        return self._storage().location(layout.job_dir(self.job_id))

    @property
    def kubernetes_job_name(self) -> str | None:
        """The Kubernetes Job (and its pods' ``job-name`` label) this job runs as on the
        ``kubernetes`` and ``gke`` backends; None on other backends (the backend's kind
        names the object, if it has one)."""
        kind: BackendKind = registry.backend_kind(self.target.get("backend"))
        return kind.job_object_name(self.job_id)

    def _backend_option(self, name: str) -> Any:
        """The stored target's ``name`` where this job's backend has that option, else
        None (a local job has no namespace, image or accelerator)."""
        kind: BackendKind = registry.backend_kind(self.target.get("backend"))
        return self.target.get(name) if name in kind.options else None

    @property
    def namespace(self) -> str | None:
        """The Kubernetes namespace of the job's Job and pods (``kubectl -n``); None on
        backends without namespaces."""
        kind: BackendKind = registry.backend_kind(self.target.get("backend"))
        if "namespace" not in kind.options:
            return None
        return self.target.get("namespace") or KUBERNETES_DEFAULT_NAMESPACE

    @property
    def accelerator(self) -> str | None:
        """The accelerator the job asked for (``tpu-v5e-8``, ``gpu-l4``); None: CPU, or a
        backend without accelerators."""
        value = self._backend_option("accelerator")
        return str(value) if value else None

    @property
    def image(self) -> str | None:
        """The container image the job's target named; None: the backend's default image
        (or the pod template's), or a backend without images."""
        value = self._backend_option("image")
        return str(value) if value else None

    @property
    def spot(self) -> bool | None:
        """Whether the job asked for spot (preemptible) capacity; None on a backend
        without it."""
        kind: BackendKind = registry.backend_kind(self.target.get("backend"))
        return bool(self.target.get("spot")) if "spot" in kind.options else None

    # ---- the seed kinetic's names (util/seed_names.py) -------------------------------------
    @property
    def k8s_name(self) -> str | None:
        """Deprecated: kinetic's name of ``kubernetes_job_name``."""
        said("JobHandle.k8s_name", "JobHandle.kubernetes_job_name")
        return self.kubernetes_job_name

    @property
    def image_uri(self) -> str | None:
        """Deprecated: kinetic's name of ``image``."""
        said("JobHandle.image_uri", "JobHandle.image")
        return self.image

    @property
    def group_index(self) -> int | None:
        """Deprecated: kinetic's name of ``index``."""
        said("JobHandle.group_index", "JobHandle.index")
        return self.index

    @property
    def group_id(self) -> str | None:
        """The batch (``BatchHandle.group_id``) this job is a child of; None otherwise."""
        return self.tags.get(BATCH_GROUP_TAG)

    @property
    def index(self) -> int | None:
        """This child's index in its batch (``kc.attach_batch(job.group_id)[job.index]``);
        None for a job that is no batch child."""
        value = self.tags.get(BATCH_INDEX_TAG)
        return int(value) if value is not None and value.isdigit() else None

    @property
    def result_uri(self) -> str:
        """URI of the result envelope (read it with ``attach(job_id).result()``)."""
        return self._storage().location(self._path(layout.RESULT))

    # ---- observe --------------------------------------------------------------------------
    def state(self) -> JobState:
        return resolve_states([self])[0]

    def status(self) -> JobStatus:
        return self.state().status

    def done(self) -> bool:
        return self.state().terminal

    def wait(
        self, timeout: float | None = None, *, on_status_change: OnStatusChange | None = None
    ) -> JobState:
        """Block until the job is terminal. WaitTimeout leaves it running.

        ``on_status_change(state)`` is called once per transition the wait observes (a
        new status or reason: the first state seen, the terminal one); one that raises is
        logged and the wait goes on."""
        return wait_states([self], timeout=timeout, on_status_change=on_status_change)[0]

    async def await_(
        self, timeout: float | None = None, *, on_status_change: OnStatusChange | None = None
    ) -> JobState:
        """Async twin of ``wait``, through the process's shared poller (an async
        ``on_status_change`` is awaited)."""
        return await shared_poller().wait(self, timeout, on_status_change)

    astate = in_thread(state)

    def history(self) -> list[Transition]:
        """Every recorded transition of this job, oldest first, across the attempts that
        recovered it (or that it recovered): e.g. how long it sat ``Unschedulable``."""
        storage = self._storage()
        return [t for job_id, n in self._attempts() for t in transitions(storage, job_id, n)]

    ahistory = in_thread(history)

    def _attempts(self) -> list[tuple[str, int]]:
        """(job id, attempt) of every attempt of this job, oldest first: the attempts this
        one recovered and the ones that recovered it (bounded: a chain is short)."""
        storage = self._storage()
        chain = [(self.job_id, self.attempt)]
        earlier = self.recovered_from
        while earlier and len(chain) < 100:
            chain.insert(0, (earlier, chain[0][1] - 1))
            try:
                earlier = load_handle(storage, earlier, self._key).recovered_from
            except JobNotFound:  # cleaned up to its tombstone, or never stored
                break
        while (later := recovery.next_recorded(storage, chain[-1][0])) and len(chain) < 100:
            chain.append((later, chain[-1][1] + 1))
        return chain

    def current(self) -> JobHandle:
        """The handle of the newest attempt of this job (itself unless it was recovered)."""
        state = self.state()
        if state.job_id == self.job_id:
            return self
        return load_handle(self._storage(), state.job_id, self._key)

    def preview(self, state: JobState | None = None) -> Preview | None:
        """What a viewer shows of the job's outcome, never unpickled: a bounded repr of its
        value, or its failure as data (type name, message, traceback), written by the
        runner; a ``Preview`` that only says why where there is none (an older version
        wrote it, or it was collected); None before an outcome is stored. ``state``: the
        job's state if read already (the newest attempt holds the outcome). Loading the
        value itself runs the job's code: only ``result()`` does that."""
        state = state or self.state()
        return shown(self._storage(), state.job_id)

    apreview = in_thread(preview)

    def logs(self, tail: int | None = None, *, worker: int | None = None) -> str:
        """The job's output, or its last ``tail`` lines (of each worker). A multi-host job:
        every worker's lines led by ``[w{k}] ``, worker by worker; ``worker=k`` only
        worker k's, unprefixed."""
        count = self.workers
        check_worker(self.job_id, worker, count)
        backend = backend_for(self)
        if count == 1:
            return backend.logs(self.job_id, tail)
        if worker is not None:
            return backend.logs(self.job_id, tail, worker=worker)
        return "".join(prefixed(k, backend.logs(self.job_id, tail, worker=k)) for k in range(count))

    alogs = in_thread(logs)

    @property
    def workers(self) -> int:
        """How many workers (hosts) run this job, each with its own log: 1 unless it is a
        multi-host job (``num_hosts`` > 1, a multi-host TPU slice)."""
        return workers_of(self.target)

    def read_logs(
        self, cursor: str | None = None, *, worker: int | None = None
    ) -> tuple[str, str | None]:
        """Log text written after ``cursor`` (None: from the start) and the next cursor.

        Bounded per call: for streaming logs incrementally (e.g. from a trigger). A
        multi-host job: whole lines of every worker, prefixed ``[w{k}] `` (one cursor
        for all, opaque), or ``worker=k``'s own output.
        """
        count = self.workers
        check_worker(self.job_id, worker, count)
        backend = backend_for(self)
        if count == 1 and not is_merged(cursor):
            return backend.read_logs(self.job_id, cursor)
        if worker is not None:
            return backend.read_logs(self.job_id, cursor, worker=worker)

        def one(at: str | None, k: int) -> tuple[str, str | None]:
            return backend.read_logs(self.job_id, at, worker=k)

        return read_merged(one, count, cursor)

    def follow_logs(
        self,
        *,
        cursor: str | None = None,
        timeout: float | None = None,
        worker: int | None = None,
    ) -> LogStream:
        """Iterate the job's log lines as they are written, until the job ends and its log
        is drained (see ``LogStream``; ``worker``: one worker of a multi-host job)."""
        check_worker(self.job_id, worker, self.workers)
        return LogStream(self, cursor=cursor, timeout=timeout, worker=worker)

    def afollow_logs(
        self,
        *,
        cursor: str | None = None,
        interval: float | None = None,
        timeout: float | None = None,
        until: Until | None = None,
        best_effort: bool = False,
        worker: int | None = None,
    ) -> LogStream:
        """Async twin of ``follow_logs`` (``async for line in job.afollow_logs()``): reads
        every ``interval`` seconds and stops early once ``until()`` is True."""
        check_worker(self.job_id, worker, self.workers)
        return LogStream(
            self,
            cursor=cursor,
            interval=interval,
            timeout=timeout,
            until=until,
            best_effort=best_effort,
            worker=worker,
        )

    # ---- reach ----------------------------------------------------------------------------
    def port_forward(self, *ports: str | int, worker: int = 0) -> PortForward:
        """Forward local ports to the job's ports while it runs, as ``kubectl port-forward``
        (TensorBoard, a profiler): ``"16006:6006"``, ``6006`` (same both sides), ``":6006"``
        (any free local port). A context manager; ``local_port(remote)`` says where to
        connect. ``worker``: which worker of a multi-host job. A backend whose jobs run on
        this machine opens nothing: ``already_local`` is True, ``note`` says where. The
        job must be RUNNING (JobNotRunning otherwise)."""
        specs = parse_ports(ports)
        check_worker(self.job_id, worker, self.workers)
        state = self.state()
        if state.status is not JobStatus.RUNNING:
            why = ": ".join(x for x in (state.reason, state.message) if x)
            raise JobNotRunning(
                f"job {self.job_id} is {state.status.value}"
                + (f" ({why})" if why else "")
                + ": nothing to forward to. "
                + ("Its ports open once it runs." if not state.terminal else "It has ended.")
            )
        forward = getattr(backend_for(self), "port_forward", None)
        if forward is None:
            raise ConfigError(
                f"the {self.target.get('backend')} backend cannot forward ports to a job."
            )
        result: PortForward = forward(state.job_id, specs, worker if self.workers > 1 else None)
        return result

    aport_forward = in_thread(port_forward)

    # ---- collect --------------------------------------------------------------------------
    def result(
        self,
        timeout: float | None = None,
        *,
        cleanup: bool = True,
        stream_logs: bool = False,
        on_status_change: OnStatusChange | None = None,
        cleanup_timeout: float | None = CLEANUP_TIMEOUT,
    ) -> Any:
        """Wait, then return the value or raise the remote exception.

        On success the job's backend resources and stored artifacts are cleaned up unless
        ``cleanup=False``; failed jobs keep everything for debugging. ``stream_logs``
        prints the job's log lines to stdout as they arrive (the log stream is the wait:
        no extra status polls); ``on_status_change(state)`` is called once per observed
        transition (see ``wait``); ``cleanup_timeout`` bounds the cleanup (None: no
        bound): past it the value is returned, the cleanup goes on in the background and
        a warning says to run ``kinetic jobs cleanup`` if this process ends first.
        """
        _check_result_args(timeout, on_status_change, cleanup_timeout)
        if stream_logs:
            stream = self._log_stream(timeout, on_status_change)
            for line in stream:
                print(line, flush=True)
            state = stream.state
        else:
            state = self.wait(timeout, on_status_change=on_status_change)
        assert state is not None  # a stream that was not stopped ends with the job's state
        return self._collect(state, cleanup, cleanup_timeout)

    async def aresult(
        self,
        timeout: float | None = None,
        *,
        cleanup: bool = True,
        stream_logs: bool = False,
        on_status_change: OnStatusChange | None = None,
        cleanup_timeout: float | None = CLEANUP_TIMEOUT,
    ) -> Any:
        """Async twin of ``result`` (an async ``on_status_change`` is awaited)."""
        _check_result_args(timeout, on_status_change, cleanup_timeout)
        if stream_logs:
            stream = self._log_stream(timeout, on_status_change)
            async for line in stream:
                print(line, flush=True)
            state = stream.state
        else:
            state = await self.await_(timeout, on_status_change=on_status_change)
        assert state is not None
        return await in_thread(self._collect)(state, cleanup, cleanup_timeout)

    def _log_stream(
        self, timeout: float | None, on_status_change: OnStatusChange | None
    ) -> LogStream:
        """The log stream ``result(stream_logs=True)`` waits through: every worker's lines
        of a multi-host job, prefixed ``[w{k}] ``."""
        return LogStream(self, timeout=timeout, on_status_change=on_status_change)

    def _collect(self, state: JobState, cleanup: bool, cleanup_timeout: float | None = None) -> Any:
        if state.job_id != self.job_id:  # recovered: the newest attempt holds the result
            newest = load_handle(self._storage(), state.job_id, self._key)
            return newest._collect(state, cleanup, cleanup_timeout)
        storage = self._storage()
        if state.status is JobStatus.CANCELLED:
            raise JobCancelled(
                f"Job {self.job_id} was cancelled ({state.message}); it has no result."
            )
        try:
            _, body = load_envelope(
                storage,
                self._path(layout.RESULT),
                kind="result",
                job_id=self.job_id,
                signing_key=self._key,
            )
        except FileNotFoundError:
            if storage.exists(self._path(layout.COLLECTED)):
                raise ResultNotAvailable(
                    f"The result of job {self.job_id} was already collected and cleaned up. A result "
                    "can be read again only if the caller kept it: pass cleanup=False to result() "
                    "to keep it in storage."
                ) from None
            tail = self.logs(tail=50)
            raise JobFailed(
                f"Job {self.job_id} {state.status.value} ({state.reason}): {state.message}"
                + (f"\n--- last log lines ---\n{tail}" if tail else ""),
                state=state,
                log_tail=tail,
            ) from None
        if not body["success"]:
            raise rebuild_exception(body, self.job_id)
        self.mark_collected()
        if cleanup:
            self._cleanup_collected(cleanup_timeout)
        return body["value"]

    def _cleanup_collected(self, timeout: float | None) -> None:
        """Clean up a job whose value was read, within ``timeout`` seconds (None: however
        long it takes). It never raises: the value is the caller's. A cleanup that fails
        or outlasts the bound is logged with what to run; an outlasting one goes on in a
        daemon thread (cleanup is idempotent: cut short anywhere, it is simply run again)."""
        if timeout is None:
            self._cleanup_logged()
            return
        done = threading.Event()

        def clean() -> None:
            try:
                self._cleanup_logged()
            finally:
                done.set()

        # Not threading.Thread: its start() waits for the new thread to be scheduled, a
        # few milliseconds on a busy 2-core machine at the end of every result().
        _thread.start_new_thread(clean, ())
        if not done.wait(timeout):
            log.warning(
                "kinetic: job %s succeeded and its result was read, but its cleanup did not "
                "finish within cleanup_timeout=%gs; it goes on in the background of this "
                "process: if the process ends first, run `kinetic jobs cleanup %s` (or "
                "handle.cleanup())",
                self.job_id,
                timeout,
                self.job_id,
            )

    def _cleanup_logged(self) -> None:
        try:
            self._release()  # the job succeeded: nothing runs that a cancel would stop
        except (KineticError, OSError) as exc:  # the value is read: it is the caller's
            log.warning(
                "kinetic: job %s succeeded and its result was read, but cleaning it up "
                "failed (%s: %s); what was not cleaned up is kept: run `kinetic jobs "
                "cleanup %s` (or handle.cleanup()) once that is fixed",
                self.job_id,
                type(exc).__name__,
                exc,
                self.job_id,
            )

    def mark_collected(self) -> None:
        """Record that the result was delivered without reading it (e.g. the caller passed
        a reference on). An idempotent submit with this job's key then starts a new attempt.

        Best effort: on read-only storage it is logged, not raised (reading must work with
        read-only credentials)."""
        try_write_record(self._storage(), self.job_id, layout.COLLECTED)

    # ---- stop -----------------------------------------------------------------------------
    def cancel(self, *, wait: float = CANCEL_WAIT, **kinetic_names: Any) -> bool:
        """Cancel the job durably. True only if this call decided that the job ends
        CANCELLED: from its return on every reader sees CANCELLED (the state is final at
        once). False if the job had already ended or another decider came first (its
        function returned, a deadline, another cancel); that outcome stays. A job already
        decided CANCELLED whose processes still run (an earlier cancel's delete failed, or
        its canceller died before it) is stopped now, and True is returned.

        Waits up to ``wait`` seconds for the job's processes to stop (0: return at once).
        A backend that would refuse the stop (``check_cancel``: e.g. ``PermissionDenied``,
        a Role without ``jobs: delete``) raises before anything is recorded.
        ``cleanup_timeout=`` (kinetic's) is ``wait=``, with a DeprecationWarning.
        """
        if kinetic_names:
            wait = old_keywords("cancel", kinetic_names, _CANCEL_RENAMED, _POLL_UNNEEDED).get(
                "wait", wait
            )
        state = self.state()
        if state.job_id != self.job_id:  # recovered: cancel the attempt that runs now
            return self.current().cancel(wait=wait)
        backend = backend_for(self)
        if state.terminal:
            return self._carry_out_cancel(backend, wait)
        check = getattr(backend, "check_cancel", None)
        if check is not None:  # e.g. PermissionDenied: nothing is recorded, the job runs on
            check(self.job_id)
        storage = self._storage()
        won, _ = decide(
            storage,
            self.job_id,
            JobStatus.CANCELLED.value,
            Reason.CANCELLED,
            f"cancelled from {socket.gethostname()}",
            by="cancel",
            created_at=self.created_at,
        )
        if not won:
            return False
        backend.cancel(self.job_id)
        if wait > 0:
            self._wait_stopped(backend, wait)
        return True

    def _carry_out_cancel(self, backend: Backend, wait: float) -> bool:
        """``cancel`` of a job that reads ended. A cancel decided earlier whose stop never
        happened (its delete failed in an outage, its canceller was killed after the
        record) is carried out now, and True is returned: the job ends CANCELLED and this
        call made its processes stop. A failing delete raises (``BackendError``), as the
        first call's did. Any other end: False, nothing done."""
        outcome = read_outcome(self._storage(), self.job_id)
        if outcome is None or outcome.get("status") != JobStatus.CANCELLED.value:
            return False
        if not running(backend.poll([self.job_id]).get(self.job_id, BackendState("not_found"))):
            return False
        backend.cancel(self.job_id)
        if wait > 0:
            self._wait_stopped(backend, wait)
        return True

    def _wait_stopped(self, backend: Backend, timeout: float) -> None:
        """Until the backend no longer runs the job (its processes are gone), bounded."""
        try:
            for _ in poll_ticks(
                interval=1.0,
                timeout=timeout,
                describe=lambda: f"the processes of cancelled job {self.job_id} to stop",
                watching=lambda: [self],
            ):
                if not running(backend.poll([self.job_id])[self.job_id]):
                    return
        except WaitTimeout as exc:
            log.warning("kinetic: %s", exc)

    acancel = in_thread(cancel)

    def cleanup(
        self,
        *,
        backend: bool = True,
        storage: bool = True,
        outputs: bool = False,
        cancel: bool = False,
        **kinetic_names: Any,
    ) -> None:
        """Free backend resources and stored envelopes of every attempt of this job (the
        attempts it recovered and those that recovered it), from any attempt's handle.

        A small tombstone (handle and state records) stays so the job still resolves and
        an idempotency key knows it ran. ``outputs=True`` also deletes the function's own
        files under its output dir (off by default: they are usually the point). A job
        that has not ended raises JobStillRunning and nothing is done, unless
        ``cancel=True``: then it is cancelled first. ``k8s=``/``gcs=`` (kinetic's) are
        ``backend=``/``storage=``, with a DeprecationWarning.
        """
        if kinetic_names:
            new = old_keywords("cleanup", kinetic_names, _CLEANUP_RENAMED, _CLEANUP_UNNEEDED)
            backend, storage = new.get("backend", backend), new.get("storage", storage)
        state = self.state()
        if not state.terminal:
            if not cancel:
                raise JobStillRunning(
                    f"job {self.job_id} is {state.status.value}: cleaning it up would cancel "
                    "it. Pass cancel=True (kinetic jobs cleanup --cancel) to cancel it and "
                    "clean up, or wait for it to end (job.wait()) first."
                )
            self.cancel()  # the attempt that runs now; False once it ended meanwhile
        self._release(backend=backend, storage=storage, outputs=outputs)

    def _release(
        self, *, backend: bool = True, storage: bool = True, outputs: bool = False
    ) -> None:
        """``cleanup`` of a job known to have ended: no cancel, so no status read first
        (``result()`` cleans up right after reading a terminal state)."""
        st, attempts_backend = self._storage(), backend_for(self)
        for job_id, _ in self._attempts():
            if backend:
                attempts_backend.delete(job_id)
                _forget_hold(st, job_id)  # its held processes went with the backend's
            if storage:
                for name in layout.ENVELOPES:
                    st.delete(layout.job_file(job_id, name))
            if outputs:
                delete_outputs(st, job_id, self.target.get("output_dir"))

    acleanup = in_thread(cleanup)

    def debug_hold(self, state: JobState | None = None) -> dict[str, Any] | None:
        """How to get into this failed ``debug=True`` job's held processes or pod (its
        ``debug.json``: pod, namespace, container, or pids and host; ``held_until``), or
        None when nothing is held. Only while the backend still runs the attempt: a record
        whose processes are gone (the pod killed or deleted, the machine restarted) is
        removed here (best effort), so nobody is sent to look for them. ``state``: the
        job's state when the caller just read it."""
        state = state or self.state()
        if state.status is not JobStatus.FAILED:
            return None
        storage = self._storage()
        info = debugging.held(storage, state.job_id)
        if info is None:
            return None
        backend = backend_for(self)
        polled = backend.poll([state.job_id]).get(state.job_id, BackendState("not_found"))
        if running(polled):
            return info
        _forget_hold(storage, state.job_id)
        return None

    adebug_hold = in_thread(debug_hold)

    # ---- signals and telemetry (neuro's send_signal and top) ------------------------------
    def send_signal(
        self,
        sig: int | str | signal.Signals,
        *,
        worker: int | None = None,
        wait: bool = False,
        timeout: float = signals.ACK_WAIT,
    ) -> signals.SignalRequest:
        """Send ``sig`` (``signal.SIGUSR1``, ``"SIGUSR1"``, ``"USR1"``, ``10``) to the job's
        function process: every worker's, or only ``worker``'s. The runner picks the request
        up from storage within ``signals.POLL_SECONDS`` and raises it on its main thread,
        where the function's ``signal.signal`` handler runs (e.g. "checkpoint now").

        Returns once the request is written; ``wait=True`` until every targeted worker
        acked it (``acks``; WaitTimeout after ``timeout``), or the job ended. SignalRefused
        for a job that does not run, or a signal that would stop it (SIGTERM: ``cancel()``).
        """
        req = self._signal_request(sig, worker)
        if not wait:
            return req
        for _ in poll_ticks(interval=1.0, timeout=timeout, describe=self._signal_waiting(req)):
            if (acked := self._signal_acked(req)) is not None:
                return acked
        raise AssertionError("poll_ticks never ends by itself")  # pragma: no cover

    async def asend_signal(
        self,
        sig: int | str | signal.Signals,
        *,
        worker: int | None = None,
        wait: bool = False,
        timeout: float = signals.ACK_WAIT,
    ) -> signals.SignalRequest:
        """Async twin of ``send_signal``."""
        req = await in_thread(self._signal_request)(sig, worker)
        if not wait:
            return req
        describe = self._signal_waiting(req)
        async for _ in aticks(interval=1.0, timeout=timeout, describe=describe):
            if (acked := await in_thread(self._signal_acked)(req)) is not None:
                return acked
        raise AssertionError("aticks never ends by itself")  # pragma: no cover

    def _signal_request(
        self, sig: int | str | signal.Signals, worker: int | None
    ) -> signals.SignalRequest:
        """Check everything, then write the request (nothing is written when refused)."""
        name = signals.signal_name(sig)
        check_worker(self.job_id, worker, self.workers)
        state = self.state()
        if state.job_id != self.job_id:  # recovered: signal the attempt that runs now
            return self.current()._signal_request(name, worker)
        signals.check_can_signal(self.job_id, state.status.value, name)
        return signals.request(self._storage(), self.job_id, name, worker, self._key)

    def _signal_acked(self, req: signals.SignalRequest) -> signals.SignalRequest | None:
        """``req`` with its acks once every targeted worker acked or the job ended, else None."""
        storage = self._storage()
        targets = [req.worker] if req.worker is not None else list(range(self.workers))
        acks = signals.read_acks(storage, req, targets, self._key)
        if len(acks) == len(targets) or read_outcome(storage, req.job_id) is not None:
            return dataclasses.replace(req, acks=acks)
        return None

    def _signal_waiting(self, req: signals.SignalRequest) -> Callable[[], str]:
        return lambda: (
            f"job {req.job_id} did not ack {req.signal} (request {req.request_id}); the "
            f"request stays and is delivered when the runner reads it"
        )

    def top(self) -> telemetry.JobTop:
        """The job's telemetry, sampled by its runner every ``telemetry.SAMPLE_SECONDS``:
        per worker CPU %, resident memory and, where NVML is available, each GPU's
        utilisation and memory. For an ended job: its last samples, with a ``note``."""
        state = self.state()
        handle = self if state.job_id == self.job_id else self.current()
        return telemetry.read_top(
            handle._storage(), handle.job_id, handle.workers, state.status.value, handle._key
        )

    atop = in_thread(top)

    # ---- usage ----------------------------------------------------------------------------
    def usage(self, *, prices: dict[str, Any] | str | None = None) -> Usage:
        """What the job used, attempt by attempt across its recoveries: chips, queued and
        running time, chip-hours split into useful and lost (see ``kinetic_core.control.usage``).
        With a price table (``prices``, else the job's target's, else ``KINETIC_PRICES``:
        a table or a JSON/YAML file path) also the cost. Reads storage only; an ended
        attempt's figures are recorded once in its ``usage.json``."""
        return job_usage(self._attempt_handles(), prices)

    ausage = in_thread(usage)

    def _attempt_handles(self) -> list[JobHandle]:
        """The handles of every attempt of this job, oldest first (an attempt whose handle
        is unreadable or forged is left out)."""
        storage, found = self._storage(), []
        for job_id, _ in self._attempts():
            try:
                found.append(
                    self if job_id == self.job_id else load_handle(storage, job_id, self._key)
                )
            except JobNotFound:
                continue
        return found


_CANCEL_RENAMED = {"cleanup_timeout": "wait"}
_CLEANUP_RENAMED = {"k8s": "backend", "gcs": "storage"}
_POLL_UNNEEDED = {"cleanup_poll_interval": "waits here poll on an adaptive schedule"}
_CLEANUP_UNNEEDED = {
    **_POLL_UNNEEDED,
    "cleanup_timeout": "cleanup() deletes without waiting for the deletion",
}


def _forget_hold(storage: Storage, job_id: str) -> None:
    """Remove a debug hold's record whose processes are gone (best effort: a reader with
    read-only storage leaves it; ``debug_hold`` checks the backend all the same)."""
    try:
        storage.delete(layout.job_file(job_id, debugging.DEBUG))
    except (KineticError, OSError) as exc:
        log.debug("kinetic: could not remove the debug record of %s: %s", job_id, exc)


def _check_result_args(timeout: Any, on_status_change: Any, cleanup_timeout: Any) -> None:
    """ConfigError, before anything waits, for arguments of ``result`` that cannot work."""
    for name, value in (("timeout", timeout), ("cleanup_timeout", cleanup_timeout)):
        if value is not None and (
            not isinstance(value, int | float) or isinstance(value, bool) or value < 0
        ):
            raise ConfigError(
                f"{name} must be None (no bound) or a number of seconds >= 0, got {value!r}."
            )
    StatusChanges.of(on_status_change)


# ---- attach / list ------------------------------------------------------------------------


def load_handle(storage: Storage, job_id: str, signing_key: str | None = None) -> JobHandle:
    """The handle stored for ``job_id``. It must name that job and that storage root and,
    when a signing key is set (argument or ``KINETIC_SIGNING_KEY``), carry a valid
    signature; otherwise CorruptRecord (a JobNotFound) says which file and what to do."""
    validate_id(job_id)
    key = layout.job_file(job_id, layout.HANDLE)
    try:
        raw = storage.read_bytes(key)
    except FileNotFoundError:
        raise JobNotFound(
            f"No job {job_id!r} under {storage.uri}. Check the id, and that KINETIC_STORAGE "
            "(or storage=) points at the storage the job was submitted to."
        ) from None
    where = storage.location(key)
    signing_key = signing_key or os.environ.get("KINETIC_SIGNING_KEY") or None

    def corrupt(problem: str) -> CorruptRecord:
        return CorruptRecord(
            f"{where} {problem}: it is not acted on. If the job is yours, inspect the file; "
            f"to drop the job, delete {storage.location(layout.job_dir(job_id))}.",
            job_id=job_id,
            path=where,
        )

    try:
        data = json.loads(raw)
    except ValueError:
        raise corrupt("is not valid JSON (truncated or garbled)") from None
    if not isinstance(data, dict):
        raise corrupt("is not a JSON object")
    signature = data.pop("hmac", None)
    if signing_key and not signing.valid(signing_key, data, signature):
        raise corrupt(
            "is unsigned or has an invalid signature (edited, forged, or written with another "
            "KINETIC_SIGNING_KEY)"
        )
    if data.get("job_id") != job_id:
        raise corrupt(f"names job {data.get('job_id')!r}, not the job of its folder")
    target = data.get("target")
    stored = [data.get("storage"), target.get("storage") if isinstance(target, dict) else None]
    if not all(s is None or _same_root(s, storage.uri) for s in stored) or stored[0] is None:
        raise corrupt(
            f"points at storage {stored[0]!r} (target {stored[1]!r}), not at {storage.uri!r} "
            "where it is stored"
        )
    try:
        return JobHandle.from_dict(data, signing_key=signing_key)
    except (TypeError, ValueError, KineticError) as exc:
        raise corrupt(f"cannot be loaded ({exc})") from None


def _same_root(a: str, b: str) -> bool:
    """Two storage URIs name one root (file:// paths compared after resolving links; the
    same text needs no resolving, which is what listing thousands of handles meets)."""
    if a == b:
        return True
    if a.startswith("file://") and b.startswith("file://"):
        return os.path.realpath(a[len("file://") :]) == os.path.realpath(b[len("file://") :])
    return a.rstrip("/") == b.rstrip("/")


def attach(job_id: str, *, target: Target | dict[str, Any] | None = None) -> JobHandle:
    """Reattach to a job from any process or machine that can read its storage root."""
    resolved = Target.coerce(target).resolve()
    return load_handle(open_storage(resolved.storage or ""), job_id, resolved.signing_key)
