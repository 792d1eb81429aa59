"""A job's output kept in storage: one byte stream per worker, in bounded chunks.

The writer (fed by ``log_capture.py`` inside the job) holds the open chunk in memory,
writes it again (same key, growing) at each flush, and seals it once it holds exactly
``chunk_bytes`` bytes; chunk ``n`` therefore starts at byte ``n * chunk_bytes`` of the
stream and a reader finds any byte offset without listing. The writer never does I/O on
the caller's thread of ``feed`` and never raises from a flush: a log must not fail a job.

``stream.json`` (written first) says when the capture started (a pod's log lines stamped
before it are not in the stream: what the container printed before the runner) and the
chunk size; once rewritten with ``ended_ns`` the stream is complete.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque

from kinetic_core.records import layout

TYPE_CHECKING = False  # no `typing` at run time: a job's start path (runner.py)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from kinetic_core.storage import Storage

#: Bound of one chunk object (and of the memory a pending chunk holds).
CHUNK_BYTES = 4 << 20
#: Sealed chunks kept in memory while storage refuses them; older ones are then dropped
#: (the pod's own log still has them): a slow store must not grow the job's memory.
MAX_PENDING = 8
GAP_NOTE = "[kinetic: {} bytes of this log were not kept in storage (storage refused them)]\n"


class ChunkWriter:
    """The output of one worker of one job, written to storage in bounded chunks."""

    def __init__(
        self,
        storage: Storage,
        job_id: str,
        *,
        worker: int = 0,
        chunk_bytes: int = CHUNK_BYTES,
        started_ns: int | None = None,
        warn: Callable[[str], None] | None = None,
    ) -> None:
        self.storage = storage
        self.job_id = job_id
        self.worker = worker
        self.chunk_bytes = chunk_bytes
        self.started_ns = started_ns or time.time_ns()
        self.dropped = 0  # bytes of sealed chunks given up while storage refused them
        self._warn = warn
        self._warned = False
        self._lock = threading.Lock()  # the buffers: feed (pump) vs flush (uploader)
        self._io = threading.Lock()  # one flush at a time: an older snapshot never wins
        self._seq = 0
        self._open = bytearray()
        self._dirty = False
        self._sealed: deque[tuple[int, bytes]] = deque()

    # ---- the job's side: bytes in -------------------------------------------------------
    def feed(self, data: bytes) -> None:
        """Append output; seals full chunks. Memory only: never blocks on storage."""
        view = memoryview(data)
        with self._lock:
            while view:
                room = self.chunk_bytes - len(self._open)
                self._open += view[:room]
                view = view[room:]
                self._dirty = True
                if len(self._open) == self.chunk_bytes:
                    self._seal()

    def _seal(self) -> None:
        self._sealed.append((self._seq, bytes(self._open)))
        self._seq += 1
        self._open = bytearray()
        self._dirty = False
        while len(self._sealed) > MAX_PENDING:
            self.dropped += len(self._sealed.popleft()[1])

    def pending(self) -> bool:
        """Sealed chunks wait for a write (the uploader writes them before the interval)."""
        return bool(self._sealed)

    # ---- the writer's side: chunks out ---------------------------------------------------
    def begin(self) -> None:
        """Write ``stream.json`` with the start time: readers of a pod's log need it."""
        self._write_meta()

    def flush(self) -> bool:
        """Write the sealed chunks and the open one if it grew; False if storage refused
        (what it refused stays for the next flush)."""
        with self._io:
            with self._lock:
                sealed = list(self._sealed)
                self._sealed.clear()
                seq, data, dirty = self._seq, bytes(self._open), self._dirty
                self._dirty = False
            for i, (n, chunk) in enumerate(sealed):
                if not self._put(layout.log_chunk(self.job_id, n, self.worker), chunk):
                    self._give_back(sealed[i:], dirty)
                    return False
            if dirty and not self._put(layout.log_chunk(self.job_id, seq, self.worker), data):
                with self._lock:
                    self._dirty = True
                return False
            return True

    def end(self) -> bool:
        """The last flush, then ``stream.json`` marked ended (the stream is complete)."""
        done = self.flush()
        return self._write_meta(ended_ns=time.time_ns()) and done

    def _give_back(self, unwritten: list[tuple[int, bytes]], dirty: bool) -> None:
        with self._lock:
            self._sealed.extendleft(reversed(unwritten))
            self._dirty = self._dirty or dirty
            while len(self._sealed) > MAX_PENDING:
                self.dropped += len(self._sealed.popleft()[1])

    def _write_meta(self, **extra: Any) -> bool:
        meta = {"started_ns": self.started_ns, "chunk_bytes": self.chunk_bytes, **extra}
        key = layout.log_stream_meta(self.job_id, self.worker)
        return self._put(key, json.dumps(meta).encode())

    def _put(self, key: str, data: bytes) -> bool:
        """One write (storage retries transient errors under ``retrying.py``'s policy);
        a refusal is said once, on the job's stderr, and the job goes on."""
        try:
            self.storage.write_bytes(key, data)
            return True
        except Exception as exc:
            if not self._warned and self._warn is not None:
                self._warned = True
                self._warn(
                    f"kinetic: the job's log cannot be kept in storage ({type(exc).__name__}: "
                    f"{exc}); the job goes on, its pod log has every line; retrying at each flush\n"
                )
            return False


# ---- reading a stream back ---------------------------------------------------------------
def read_meta(storage: Storage, job_id: str, worker: int = 0) -> dict[str, Any] | None:
    """The stream's ``stream.json``, or None when the runner kept no stream (yet)."""
    try:
        meta = json.loads(storage.read_bytes(layout.log_stream_meta(job_id, worker)))
    except (FileNotFoundError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def chunk_size(meta: dict[str, Any] | None) -> int:
    return int((meta or {}).get("chunk_bytes") or CHUNK_BYTES)


def read_at(
    storage: Storage, job_id: str, offset: int, *, chunk_bytes: int, worker: int = 0
) -> tuple[bytes, int]:
    """Bytes from ``offset`` to the end of its chunk (whole lines when the chunk has a line
    end), and the offset after them. A chunk storage lost (refused while the job ran) is
    skipped with a note when a later one exists."""
    seq, inner = divmod(offset, chunk_bytes)
    try:
        data = storage.read_bytes(layout.log_chunk(job_id, seq, worker))
    except FileNotFoundError:  # not written yet, or lost: a later chunk tells which
        later = [n for n in _chunks(storage, job_id, worker) if n > seq]
        if later:
            return GAP_NOTE.format(later[0] * chunk_bytes - offset).encode(), later[0] * chunk_bytes
        return b"", offset
    data = data[inner:]
    cut = data.rfind(b"\n") + 1
    if 0 < cut < len(data):  # keep the unfinished last line for the next read
        data = data[:cut]
    return data, offset + len(data)


def _chunks(storage: Storage, job_id: str, worker: int) -> list[int]:
    names = storage.list_names(layout.log_stream_dir(job_id, worker))
    return sorted(int(n[:-4]) for n in names if n.endswith(".log") and n[:-4].isdigit())


def read_all(storage: Storage, job_id: str, *, worker: int = 0, tail: int | None = None) -> str:
    """The whole stream, or its last ``tail`` lines (reading chunks backwards: bounded
    reads for a huge log)."""
    meta = read_meta(storage, job_id, worker)
    if meta is None:
        return ""
    size, newlines = chunk_size(meta), 0
    parts: list[bytes] = []
    seqs = _chunks(storage, job_id, worker)
    for i in reversed(range(len(seqs))):
        try:
            data = storage.read_bytes(layout.log_chunk(job_id, seqs[i], worker))
        except FileNotFoundError:  # deleted meanwhile
            continue
        before = seqs[i - 1] + 1 if i else 0
        gap = GAP_NOTE.format((seqs[i] - before) * size).encode() if seqs[i] > before else b""
        parts[:0] = [gap, data]
        newlines += data.count(b"\n") + (1 if gap else 0)
        if tail is not None and newlines > tail:
            break
    text = b"".join(parts).decode("utf-8", "replace")
    if tail is None:
        return text
    lines = text.splitlines()[-tail:] if tail > 0 else []
    return "".join(f"{line}\n" for line in lines)
