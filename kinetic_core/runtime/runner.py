"""``python -m kinetic_core.runtime.runner --storage URI --job-id ID``: what runs inside a job.

Downloads and verifies the call envelope, runs the function, writes the result envelope
create-only and records start/finish. Exit 0 on success, 1 on a failure of the function or
of a setup phase (``load``, ``store``), 2 when even storage is unreachable. Imports stay
small: this is on the critical path of every job.

Each worker of a multi-host job runs this too (its place: ``kc.worker()``), the same
function: it writes its own started record (worker 0 ``started.json`` as a single-host
job, worker k ``started-worker-{k}.json``), so a replacement pod of worker k refuses to run
it again; only worker 0 stores a success (its value is the result); any worker whose
function raises stores the failure (create-only: the first failing worker wins), naming
the worker; a worker stopped from outside decides nothing. Before the function runs the
worker gets the variables the frameworks read (``workers.framework_env``), where not set.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

# Only what the path to ``started.json`` needs is imported here: a pod or a Slurm node
# starts this module in a fresh interpreter, and every import before the job's start is
# on its critical path (``bench/runner_start.py``). The rest (the envelope and
# cloudpickle, outputs, the log tee, notices, versions) is imported once the job started,
# where it is used; the sidecar thread imports its own machinery (``sidecar.py``). The
# modules below import neither ``typing``, ``dataclasses`` nor ``pathlib`` at run time
# (~25 ms of a fresh interpreter here; ``tests/core/test_runner_start.py``).
from kinetic_core.errors import JobSetupError
from kinetic_core.records import layout
from kinetic_core.records.lifecycle import BY_RUNNER, decide, read_json, read_outcome, write_record
from kinetic_core.runtime import sidecar
from kinetic_core.storage import open_storage
from kinetic_core.util.ids import validate_id
from kinetic_core.util.worker_env import read_place

TYPE_CHECKING = False  # no `typing` at run time: see above
if TYPE_CHECKING:
    from typing import Any, NoReturn

    from kinetic_core.storage import Storage
    from kinetic_core.util.workers import Worker

#: What a job imports once it started, where it is used (a zygote that forks runners
#: preloads these, so its jobs import none of them: ``backends/local/zygote.py``).
AFTER_START = (
    "traceback",
    "kinetic_core.runtime.log_capture",
    "kinetic_core.util.workers",
    "kinetic_core.data.outputs",
    "kinetic_core.records.envelope",
    "kinetic_core.records.job_index",
    "kinetic_core.records.preview",
    "kinetic_core.runtime.bootstrap",
    "kinetic_core.runtime.notice",
    "kinetic_core.runtime.signals",
    "kinetic_core.runtime.telemetry",
    "kinetic_core.runtime.versions",
    "kinetic_core.states",
)


class PhaseError(JobSetupError):
    """A setup phase failed (the call could not be loaded: its module does not import
    here, say), so the function never started; the message explains what to do. A
    ``KineticError``: it reaches the caller of ``result()`` as the job's failure."""


def _load_call(storage: Storage, job_id: str, signing_key: str | None) -> dict[str, Any]:
    from kinetic_core.records.envelope import load_envelope, read_summary, skew_note
    from kinetic_core.runtime import versions

    key = layout.job_file(job_id, layout.PAYLOAD)
    try:
        _, call = load_envelope(
            storage,
            key,
            kind="call",
            job_id=job_id,
            signing_key=signing_key,
            check=versions.check_header,  # ImageMismatch: before anything is unpickled
        )
        return call
    except ModuleNotFoundError as exc:
        header = read_summary(storage, key)
        raise PhaseError(
            f"The job's function needs module {exc.name!r}, which is not importable in the job's "
            f"environment. Install it in the job image, or ship it with "
            f"Target(pickle_by_value=[{(exc.name or '').split('.')[0]!r}]). {skew_note(header)}"
        ) from exc
    except (AttributeError, ImportError, TypeError) as exc:
        header = read_summary(storage, key)
        raise PhaseError(
            f"Cannot unpickle the job's function or arguments: {type(exc).__name__}: {exc}. "
            f"{skew_note(header)}"
        ) from exc


def run_job(storage_uri: str, job_id: str) -> int:
    validate_id(job_id)
    place = read_place(os.environ)  # kc.worker()'s; the dataclass itself once started
    index = place[0]
    storage = open_storage(storage_uri)
    signing_key = os.environ.get("KINETIC_SIGNING_KEY") or None
    decided = read_outcome(storage, job_id)
    if decided is not None:  # cancelled (or stopped) before it started: run nothing
        line = f"kinetic: job {job_id} is already {decided['status']}; not running it"
        print(line, file=sys.stderr)
        if index and decided["status"] == "SUCCEEDED":
            # a late worker of a slice whose worker 0 already succeeded: nothing left to do
            _keep_refusal(storage, job_id, index, line)
            return 0
        return 1
    handle = read_json(storage, layout.job_file(job_id, layout.HANDLE))
    other = _other_attempt(storage, job_id, handle)
    if other is not None:
        from kinetic_core.states import REFUSED_EXIT_CODE

        print(f"kinetic: job {job_id} is not run: {other}", file=sys.stderr)
        return REFUSED_EXIT_CODE
    started = started_record(index)
    if not write_record(storage, job_id, started, create_only=True, event="started", worker=index):
        return _refuse_second_run(storage, job_id, index)
    # Started: the output is teed into storage (``log_capture``) while the job loads, runs,
    # stores and decides; every end stops the tee, so the rest of the output reaches storage.
    from kinetic_core.runtime import log_capture
    from kinetic_core.util.workers import Worker

    log_capture.start(storage, job_id, worker=index)
    try:
        return _run_started(storage_uri, storage, job_id, Worker(*place), handle, signing_key)
    except Exception as exc:  # said while the tee still runs: it reaches the job's log
        return _cannot_run(job_id, exc)
    finally:
        sidecar.stop()  # its last sample, after the outcome (a no-op once stopped)
        log_capture.stop()


def _run_started(
    storage_uri: str,
    storage: Storage,
    job_id: str,
    me: Worker,
    handle: dict[str, Any] | None,
    signing_key: str | None,
) -> int:
    """The job has started (its ``started`` record is written): load, run, store, decide."""
    from kinetic_core.data import outputs
    from kinetic_core.records.envelope import failure_body, success_body
    from kinetic_core.runtime import bootstrap, log_capture, notice, versions

    bootstrap.replay()  # what a requirements= install printed before the capture began
    _framework_env(me, handle)
    phase = "load"
    try:
        versions.check_setup()  # RequirementsFailed (the call's header: versions.check_header)
        call = _load_call(storage, job_id, signing_key)
        os.environ.update(call.get("env") or {})
        os.environ["KINETIC_JOB_ID"] = job_id
        outputs.prepare(storage, job_id, handle, worker=me.index, workers=me.count)
        args, kwargs = _arrive(call, storage, job_id, me.index)
        phase = "run"
        notice.install()  # SIGTERM (preemption, cancel, deadline): checkpoint, then stop
        sidecar.start(storage, job_id, me.index, signing_key)  # send_signal() and top()
        value = call["fn"](*args, **kwargs)
        if hasattr(value, "__await__"):  # an async function: asyncio only imported here
            import asyncio

            value = asyncio.run(_await(value))
        body = success_body(value)
    except BaseException as exc:  # the job must always report, even on SystemExit
        import traceback

        tb = traceback.format_exc()
        print(tb, file=sys.stderr, flush=True)
        if notice.preempted():  # stopped from outside: no result, the backend says why
            outputs.finish(storage_uri, job_id, me.index)  # but the checkpoint reaches storage
            return notice.EXIT_CODE
        if me.count > 1:
            name_worker(exc, me.index)
        body = failure_body(exc, phase=phase, traceback_text=tb)
        body["reason"] = versions.reason_of(exc)
        code = exc.code if isinstance(exc, SystemExit) and isinstance(exc.code, int) else 1
        body["exit_code"] = code if 0 < code < 256 else 1
        if me.count > 1:
            body["worker"] = me.index
            body["exc_message"] = f"worker {me.index}: {body['exc_message']}"
    # The call is spent: its arguments (a 1 GiB one, say) go before the result is
    # written, unless the value refers to them, and its page cache reuses their memory.
    call, args, kwargs = {}, (), {}
    sidecar.halt()  # no signal handler runs while the outcome is written
    held = not body["success"] and _debug_note(storage, job_id, handle, body, me.index)
    # in storage before the state can read terminal (a held job keeps its local folder)
    lost = outputs.finish(storage_uri, job_id, me.index, keep=held)
    if lost is not None and body["success"]:  # a success means the outputs arrived too
        body = _outputs_not_synced(job_id, lost, me)
    log_capture.sync()  # so is the job's log
    if body["success"] and not me.is_coordinator:  # only worker 0's value is the result
        write_record(storage, job_id, finished_record(me.index), event="finished", success=True)
        return 0
    _store(storage, job_id, body, signing_key, (handle or {}).get("created_at"))
    if held:
        _hold(storage_uri, job_id, me.index)
    return 0 if body["success"] else int(body.get("exit_code") or 1)


def _outputs_not_synced(job_id: str, problem: str, me: Worker) -> dict[str, Any]:
    """The failure a job whose function returned ends with when its outputs did not reach
    storage: FAILED, reason OutputsNotSynced (what ``problem`` says: why, and where the
    files are kept)."""
    from kinetic_core.errors import OutputsNotSynced
    from kinetic_core.records.envelope import failure_body
    from kinetic_core.states import Reason

    where = f" (worker {me.index})" if me.count > 1 else ""
    exc = OutputsNotSynced(f"Job {job_id}{where}: its function returned, but {problem}.")
    body = failure_body(exc, phase="outputs", traceback_text="")
    body["reason"] = Reason.OUTPUTS_NOT_SYNCED.value
    body["exit_code"] = 1
    if me.count > 1:
        body["worker"] = me.index
    return body


def _debug_note(
    storage: Storage, job_id: str, handle: dict[str, Any] | None, body: dict[str, Any], worker: int
) -> bool:
    """A failed ``debug=True`` job: record how to get in (``debug.json``, and a line in the
    failure's traceback) before the failure is; False for any other job."""
    from kinetic_core.runtime import debugging

    if not debugging.wanted(handle):
        return False
    info = debugging.facts(job_id, os.environ.get("KINETIC_OUTPUT_DIR"))
    try:
        debugging.record(storage, job_id, info)
    except Exception as exc:  # never in the way of recording the failure: no hold then
        print(f"kinetic: debug hold not started: {exc}", file=sys.stderr, flush=True)
        return False
    body["traceback"] = f"{body.get('traceback', '')}\n{debugging.describe(info)}"
    print(debugging.describe(info), file=sys.stderr, flush=True)
    return True


def _hold(storage_uri: str, job_id: str, worker: int) -> None:
    """Keep this process (and, on Kubernetes, its pod) alive for inspection once the
    failure is recorded, then remove the job's local folder as ``outputs.finish`` would."""
    from kinetic_core.data import outputs
    from kinetic_core.runtime import debugging, log_capture

    sidecar.stop()  # its last sample: the job has ended
    log_capture.stop()  # the log stream ends now: nothing waits on a held job's log
    debugging.hold()
    outputs.finish(storage_uri, job_id, worker)
    debugging.release(open_storage(storage_uri), job_id)


def started_record(worker: int) -> str:
    """Worker ``worker``'s started record: ``started.json`` for worker 0 (a single-host
    job's), ``started-worker-{k}.json`` for the others (each worker's one-run fence)."""
    return layout.STARTED if worker == 0 else f"started-worker-{worker}.json"


def finished_record(worker: int) -> str:
    return layout.FINISHED if worker == 0 else f"finished-worker-{worker}.json"


#: The note a multi-host job's failure carries: ``failures.failed_worker`` reads it back.
WORKER_NOTE = "kinetic: raised on worker {}"


def name_worker(exc: BaseException, index: int) -> None:
    """Say on the exception which worker raised it (a note, and ``kinetic_worker``), before
    it is pickled into the result: ``result()`` re-raises it with that note."""
    with contextlib.suppress(Exception):  # an exception that refuses attributes: the note
        exc.add_note(WORKER_NOTE.format(index))
        exc.kinetic_worker = index  # type: ignore[attr-defined]


def _framework_env(me: Worker, handle: dict[str, Any] | None) -> None:
    """The variables JAX, libtpu and PyTorch read (``workers.framework_env``), where not
    set already (GKE's TPU webhook sets its own). A single-host job's env is left as is."""
    if me.count == 1:
        return
    from kinetic_core.util import workers

    port_text = me.coordinator.rpartition(":")[2]
    port = int(port_text) if port_text.isdigit() else workers.DEFAULT_COORDINATOR_PORT
    accelerator = str(((handle or {}).get("target") or {}).get("accelerator") or "")
    kind: Any = next((k for k in ("tpu", "gpu") if accelerator.startswith(k)), "cpu")
    for name, value in workers.framework_env(me.index, me.count, me.hostnames, port, kind).items():
        os.environ.setdefault(name, value)


def _other_attempt(storage: Storage, job_id: str, handle: dict[str, Any] | None) -> str | None:
    """Why another attempt of this job's key may run instead of this one, or None.

    A recovery starts attempt n+1 only once attempt n has ended and its processes are
    gone, so neither case happens in order; they fence a late or stray start (a pod
    created again from an old Job, a node that comes back from a partition)."""
    if read_json(storage, layout.job_file(job_id, layout.SUPERSEDED)) is not None:
        return "a later attempt of it was started already"
    earlier = (handle or {}).get("recovered_from")
    if isinstance(earlier, str) and read_outcome(storage, earlier) is None:
        return f"the attempt it recovers ({earlier}) has not ended"
    return None


def _keep_refusal(storage: Storage, job_id: str, worker: int, line: str) -> None:
    """A worker of a slice that started after worker 0 had succeeded keeps why it did not
    run as its log in storage (where ``logs(worker=k)`` reads once its pod is gone), not
    only in the pod's log: unless it had started once already, whose stream this is."""
    if read_json(storage, layout.job_file(job_id, started_record(worker))) is not None:
        return
    from kinetic_core.records.log_chunks import ChunkWriter

    writer = ChunkWriter(storage, job_id, worker=worker)
    writer.begin()
    writer.feed(f"{line}\n".encode())
    writer.end()


def _refuse_second_run(storage: Storage, job_id: str, worker: int = 0) -> int:
    """The job's function already started once: this process is a replacement (a deleted or
    evicted pod that Kubernetes restarted, say). A job id means one execution, so nothing
    runs. Nothing is decided either: the first run may still be alive (a pod deleted
    gracefully runs until its grace period ends); the backend reads this refusal as no end
    of the job, which ends as the first run does (``Lost`` if it stored nothing)."""
    first = read_json(storage, layout.job_file(job_id, started_record(worker))) or {}
    who = f"job {job_id}" + (f" worker {worker}" if worker else "")
    print(
        f"kinetic: {who}: its function started once already (on {first.get('host', '?')}, "
        f"pid {first.get('pid', '?')}); a job id means one run, so this process (a replacement "
        "of a deleted, evicted or lost one) refused to run the function more than once",
        file=sys.stderr,
    )
    from kinetic_core.states import REFUSED_EXIT_CODE

    return REFUSED_EXIT_CODE


def _arrive(
    call: dict[str, Any], storage: Storage, job_id: str, worker: int = 0
) -> tuple[Any, Any]:
    """The call's arguments with every Data as a local path; volumes in place."""
    args, kwargs, volumes = call.get("args", ()), call.get("kwargs", {}), call.get("volumes")
    if not call.get("has_data"):  # set by the submitter: no import cost for most jobs
        return args, kwargs
    from kinetic_core.data import outputs
    from kinetic_core.data.inputs import DataRef, materialize, transform

    scratch = os.path.join(outputs.local_root(job_id, worker), "data")
    for path, ref in (volumes or {}).items():
        if not os.path.ismount(path):  # a GCS FUSE mount is already there
            materialize(ref, storage, scratch, dest=path)

    def arrive(ref: DataRef) -> str:
        return materialize(ref, storage, scratch)

    return transform(args, arrive, DataRef), transform(kwargs, arrive, DataRef)


async def _await(value: Any) -> Any:
    return await value


def _store(
    storage: Storage,
    job_id: str,
    body: dict[str, Any],
    signing_key: str | None,
    created_at: float | None = None,
) -> None:
    import traceback

    from kinetic_core.records.envelope import dump_envelope, failure_body
    from kinetic_core.states import Reason

    key = layout.job_file(job_id, layout.RESULT)

    def write(b: dict[str, Any]) -> None:
        with storage.open_write(key, create_only=True) as fh:
            dump_envelope(
                fh,
                b,
                kind="result",
                job_id=job_id,
                signing_key=signing_key,
                storage=storage.uri,
                success=b["success"],
            )

    try:
        write(body)
    except FileExistsError:
        print(
            f"kinetic: result for {job_id} already exists; keeping the first one", file=sys.stderr
        )
        return
    except Exception as exc:  # the value could not be pickled: report that instead
        body = failure_body(exc, phase="store", traceback_text=traceback.format_exc())
        print(body["traceback"], file=sys.stderr, flush=True)
        write(body)
    _preview(storage, job_id, body)  # before the outcome: a viewer that reads it finds this
    summary = {
        "success": body["success"],
        "phase": body["phase"],
        "exit_code": 0 if body["success"] else int(body.get("exit_code") or 1),
    }
    if not body["success"]:
        summary["error"] = _error_line(body)
    status, reason = (
        ("SUCCEEDED", None) if body["success"] else ("FAILED", body.get("reason", Reason.ERROR))
    )
    won, winner = decide(
        storage,
        job_id,
        status,
        reason,
        summary.get("error"),
        by=BY_RUNNER,
        created_at=created_at,
        exit_code=summary["exit_code"],
    )
    if not won:  # a cancel or a deadline decided first: that is how this job ends
        print(
            f"kinetic: job {job_id} was already {(winner or {}).get('status')}; its result is not used",
            file=sys.stderr,
        )
    write_record(storage, job_id, layout.FINISHED, event="finished", **summary)


def _preview(storage: Storage, job_id: str, body: dict[str, Any]) -> None:
    """What viewers read instead of the result pickle (``records/preview.py``): made here,
    in the job, bounded in size and time. Never in the way of recording the outcome."""
    from kinetic_core.records import preview

    try:
        preview.write(storage, job_id, preview.of_body(body))
    except Exception as exc:  # viewers then say there is no preview
        print(f"kinetic: no preview of the result of {job_id}: {exc}", file=sys.stderr)


def _error_line(body: dict[str, Any]) -> str:
    """``Type: message`` of a failure, led by ``worker k: `` in a multi-host job's."""
    kind, message = body["exc_type"].rsplit(".", 1)[-1], body["exc_message"]
    if body.get("worker") is None:
        return f"{kind}: {message}"[:500]
    lead = f"worker {body['worker']}: "
    return f"{lead}{kind}: {message.removeprefix(lead)}"[:500]


def _cannot_run(job_id: str, exc: Exception) -> int:
    """Exit code 2: even storage failed the runner (the job decided nothing)."""
    print(f"kinetic runner: cannot run job {job_id}: {type(exc).__name__}: {exc}", file=sys.stderr)
    return 2


USAGE = "usage: python -m kinetic_core.runtime.runner --storage URI --job-id ID"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)  # no argparse: keep start-up lean
    try:
        storage_uri = args[args.index("--storage") + 1]
        job_id = args[args.index("--job-id") + 1]
    except (ValueError, IndexError):
        print(USAGE, file=sys.stderr)
        return 2
    for entry in reversed(json.loads(os.environ.get("KINETIC_SYS_PATH", "[]"))):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    try:
        return run_job(storage_uri, job_id)
    except Exception as exc:
        return _cannot_run(job_id, exc)
    finally:
        sidecar.stop()  # a no-op once stopped; the early returns above end here


def exit_now(code: int) -> NoReturn:
    """Exit with ``code`` as the interpreter would, minus the teardown of every module and
    object (~30 ms after a no-op job here; seconds after one that imported torch): a
    pod's or a Slurm step's end is read from this process's exit. What a job can observe
    of an exit still happens, in the interpreter's order: non-daemon threads are joined
    (after ``concurrent.futures``' exit hooks, as ``Py_FinalizeEx`` does), ``atexit``
    callbacks run, stdout and stderr are flushed."""
    import atexit
    import threading

    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # closed by the job, or a broken pipe
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
