"""Every storage path, in one place: the layout of a storage root.

```
jobs/{job_id}/handle.json        the JobHandle, create-only: the lock that decides an attempt
jobs/{job_id}/payload.pkl        call envelope
jobs/{job_id}/started.json       runner started        (records, see records.py)
jobs/{job_id}/finished.json      runner finished
jobs/{job_id}/outcome.json       how the job ended, create-only: the first decider wins
jobs/{job_id}/stop.json          (read only: the stop marker of older versions)
jobs/{job_id}/collected.json     the result was delivered
jobs/{job_id}/result.pkl         result envelope, create-only
jobs/{job_id}/preview.json       create-only, beside the result: what viewers read of it (a
                                 bounded repr of the value, or the failure as data; preview.py)
jobs/{job_id}/output.log         the job's log, kept once the backend deletes its own copy
jobs/{job_id}/logs/{worker}/stream.json    the runner's log stream: started_ns, chunk size, ended_ns
jobs/{job_id}/logs/{worker}/{seq:08d}.log  its bytes in chunks of exactly the chunk size (the
                                 last one shorter, rewritten as it grows); worker: worker-0, ...
jobs/{job_id}/history/{status}-{reason}.json  one create-only record per observed transition
jobs/{job_id}/superseded.json    create-only: the attempt that recovered this one
jobs/{job_id}/signals/{request}.json      create-only: a signal asked for (signals.py)
jobs/{job_id}/signal-acks/{request}-worker-{k}.json  worker k delivered it (or said why not)
jobs/{job_id}/telemetry/worker-{k}.json   worker k's latest telemetry sample (telemetry.py)
jobs/{job_id}/usage.json         create-only: what the ended attempt used (usage.py)
jobs/{job_id}/gc.json            kinetic gc is removing this job (written first, deleted last)
keys/{sha256(key)}.json          idempotency index: key -> attempts (a hint; ids are probed)
batches/{group_id}/manifest.json          batch header, create-only
batches/{group_id}/children/{i}.json      one record per child
batches/{group_id}/state/{marker}         create-only markers (submission complete, cancel, rounds)
batches/{group_id}/launches/{seq}.json    the launch ledger: one create-only ticket per launch
batches/{group_id}/gc.json                kinetic gc is removing this batch (first in, last out)
outputs/{job_id}/                the function's own files (KINETIC_OUTPUT_DIR, synced)
data/blobs/{sha256}              one file's bytes, content-addressed (create-only)
data/{digest}.json               a Data's manifest {path: sha256}, written last: it is complete
data/{digest}/                   file:// only: the Data laid out as hard links to its blobs
index/complete.json              every job under jobs/ has an index entry (see job_index.py)
index/jobs/{yyyy}/{mmdd}/{hh}/{inv_ms}-{job_id}[.batch={group}].json   one create-only entry
                                 per job, written before its handle.json (UTC hour of creation;
                                 inv_ms = 9999999999999 - created_at in ms: newest sorts first)
index/jobs/{yyyy}/{mmdd}/{hh}/{inv_ms}-{job_id}.end={status}.json      create-only: how it ended
data/refs/{digest}/{job_id}      the job's call uses that Data (written before its handle)
data/leases/{lease_id}.json      a submit is relying on stored data (see kinetic_core/ops/gc.py)
data/gc/{run_id}.json            a gc run may be deleting data until its deadline
```

Only this module spells these paths; everything else asks it. Callers validate ids first.
"""

from __future__ import annotations

import os
import time

from kinetic_core.util.ids import ID_PATTERN, key_digest

JOBS = "jobs"
BATCHES = "batches"
KEYS = "keys"
OUTPUTS = "outputs"
DATA = "data"
INDEX = "index"
INDEX_JOBS = "index/jobs"
#: Written once every job under ``jobs/`` has an index entry (a new store, or a reindex).
INDEX_COMPLETE = "index/complete.json"

# Files of one job.
HANDLE = "handle.json"
PAYLOAD = "payload.pkl"
RESULT = "result.pkl"
PREVIEW = "preview.json"  # what a viewer reads instead of unpickling the result
STARTED = "started.json"
FINISHED = "finished.json"
STOP = "stop.json"  # written by older versions; read as evidence
OUTCOME = "outcome.json"
#: Worker k's runner stopped itself on reading a decided end (``runtime/decided_stop.py``).
SELF_STOPPED = "self-stopped-worker-{}.json"
COLLECTED = "collected.json"
LAUNCHED = "launched.json"  # the backend accepted the job (a later "not found" means deleted)
LOG = "output.log"
SUPERSEDED = "superseded.json"
USAGE = "usage.json"
HISTORY = "history"
GC_TOMBSTONE = "gc.json"  # kinetic gc is removing this job or batch
LOGS = "logs"
LOG_STREAM = "stream.json"
SIGNALS = "signals"
SIGNAL_ACKS = "signal-acks"
TELEMETRY = "telemetry"
# What cleanup(storage=True) deletes: the envelopes, and the preview of the result (it shows
# the value: it goes with it). The records stay as a tombstone.
ENVELOPES = (PAYLOAD, RESULT, PREVIEW)

# Batch state markers.
SUBMISSION_COMPLETE = "submission_complete"
CANCEL_REQUESTED = "cancel_requested"
ROUND_PREFIX = "round-"  # round-{n}: a keyed resubmission reopened a batch that failed
FAILED_FAST = "failed_fast"  # fail_fast stopped the batch (a child failed for good)


def job_dir(job_id: str) -> str:
    return f"{JOBS}/{job_id}"


def job_file(job_id: str, name: str) -> str:
    """``jobs/{job_id}/{name}``; ``name`` is one of the file constants above."""
    return f"{JOBS}/{job_id}/{name}"


def history_dir(job_id: str) -> str:
    return f"{JOBS}/{job_id}/{HISTORY}"


def history_entry(job_id: str, name: str) -> str:
    """``jobs/{job_id}/history/{name}.json``; ``name`` is made of ``[A-Za-z0-9-]`` only."""
    return f"{JOBS}/{job_id}/{HISTORY}/{name}.json"


def log_stream_dir(job_id: str, worker: int = 0) -> str:
    """``jobs/{job_id}/logs/worker-{n}``: one worker's output stream (a multi-worker job
    keeps one per worker; a single-worker job is worker 0)."""
    return f"{JOBS}/{job_id}/{LOGS}/worker-{int(worker)}"


def log_stream_meta(job_id: str, worker: int = 0) -> str:
    return f"{log_stream_dir(job_id, worker)}/{LOG_STREAM}"


def log_chunk(job_id: str, seq: int, worker: int = 0) -> str:
    """``jobs/{job_id}/logs/worker-{n}/{seq:08d}.log``: chunk ``seq`` of one stream."""
    return f"{log_stream_dir(job_id, worker)}/{int(seq):08d}.log"


def key_index(idempotency_key: str) -> str:
    return f"{KEYS}/{key_digest(idempotency_key)}.json"


def batch_dir(group_id: str) -> str:
    return f"{BATCHES}/{group_id}"


def manifest(group_id: str) -> str:
    return f"{BATCHES}/{group_id}/manifest.json"


def children(group_id: str) -> str:
    return f"{BATCHES}/{group_id}/children"


def child(group_id: str, index: int) -> str:
    return f"{BATCHES}/{group_id}/children/{index}.json"


def batch_states(group_id: str) -> str:
    return f"{BATCHES}/{group_id}/state"


def batch_state(group_id: str, name: str) -> str:
    return f"{BATCHES}/{group_id}/state/{name}"


def outputs(job_id: str) -> str:
    return f"{OUTPUTS}/{job_id}"


def outputs_owner(path: str) -> tuple[str, str] | None:
    """For ``{root}/outputs/{job_id}[/]`` (a storage root inside a bucket, maybe empty):
    ``(root, job_id)``; None for any other path."""
    parts = path.rstrip("/").split("/")
    if len(parts) < 2 or parts[-2] != OUTPUTS or not ID_PATTERN.fullmatch(parts[-1]):
        return None
    return "/".join(parts[:-2]), parts[-1]


def data_dir(digest: str) -> str:
    """``data/{digest}``: the files of one uploaded Data (``digest`` is a sha256 hex)."""
    return f"{DATA}/{digest}"


def data_blob(sha: str) -> str:
    """``data/blobs/{sha}``: one file's bytes, named by their sha256."""
    return f"{DATA}/blobs/{sha}"


def data_manifest(digest: str) -> str:
    return f"{DATA}/{digest}.json"


DATA_BLOBS = f"{DATA}/blobs"
DATA_REFS = f"{DATA}/refs"
DATA_LEASES = f"{DATA}/leases"
DATA_GC = f"{DATA}/gc"
#: Names directly under ``data/`` that are not a Data's digest.
DATA_RESERVED = frozenset({"blobs", "refs", "leases", "gc"})


def data_ref(digest: str, job_id: str) -> str:
    """``data/refs/{digest}/{job_id}``: job ``job_id`` reads the Data ``digest``."""
    return f"{DATA_REFS}/{digest}/{job_id}"


def data_lease(lease_id: str) -> str:
    return f"{DATA_LEASES}/{lease_id}.json"


def data_gc_mark(run_id: str) -> str:
    return f"{DATA_GC}/{run_id}.json"


def batch_tombstone(group_id: str) -> str:
    return f"{BATCHES}/{group_id}/{GC_TOMBSTONE}"


def output_dir(storage_uri: str, job_id: str) -> str:
    """Default KINETIC_OUTPUT_DIR: a path for file:// storage, a URI otherwise."""
    if storage_uri.startswith("file://"):
        return os.path.join(storage_uri[len("file://") :], OUTPUTS, job_id)
    return f"{storage_uri}/{outputs(job_id)}"


def launches(group_id: str) -> str:
    return f"{BATCHES}/{group_id}/launches"


def launch_ticket(group_id: str, seq: int) -> str:
    return f"{BATCHES}/{group_id}/launches/{seq}.json"


def signals_dir(job_id: str) -> str:
    return f"{JOBS}/{job_id}/{SIGNALS}"


def signal_request(job_id: str, request_id: str) -> str:
    """``jobs/{job_id}/signals/{request_id}.json``; ``request_id`` is checked by the caller."""
    return f"{JOBS}/{job_id}/{SIGNALS}/{request_id}.json"


def signal_ack(job_id: str, request_id: str, worker: int) -> str:
    return f"{JOBS}/{job_id}/{SIGNAL_ACKS}/{request_id}-worker-{int(worker)}.json"


def telemetry_record(job_id: str, worker: int = 0) -> str:
    """``jobs/{job_id}/telemetry/worker-{k}.json``: overwritten with each new sample."""
    return f"{JOBS}/{job_id}/{TELEMETRY}/worker-{int(worker)}.json"


#: Index entry names count milliseconds down from this, so the newest sorts first.
INDEX_MS_MAX = 9_999_999_999_999


def index_bucket(created_at: float) -> str:
    """``index/jobs/{yyyy}/{mmdd}/{hh}``: the UTC hour a job was created in."""
    t = time.gmtime(created_at)
    return f"{INDEX_JOBS}/{t.tm_year:04d}/{t.tm_mon:02d}{t.tm_mday:02d}/{t.tm_hour:02d}"


def index_entry(created_at: float, job_id: str, suffix: str = "") -> str:
    """One index entry of ``job_id`` in its hour bucket; ``suffix`` (``.batch=g``,
    ``.end=succeeded``) is made of ``[a-z0-9=.-]`` only."""
    inverted = INDEX_MS_MAX - int(created_at * 1000)
    return f"{index_bucket(created_at)}/{inverted:013d}-{job_id}{suffix}.json"
