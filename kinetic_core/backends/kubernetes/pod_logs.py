"""A Kubernetes job's log: from its pod while the pod exists, from storage once it is gone.

The runner keeps its output in storage as it runs (``log_capture.py``, ``log_chunks.py``):
a byte stream that began at ``started_ns``. The pod's log holds the same bytes, after
what the container printed before the runner's capture began (lines stamped before
``started_ns``). So one cursor serves both: reading the pod, it keeps the pod position
(timestamp, lines read at it) and counts the stream's bytes delivered (the lines stamped
at or after ``started_ns``); when the pod is gone (result() cleanup, TTL, node loss) the
reader goes on in storage at that byte offset: no line twice, none lost.

Storage is read instead of the pod when the pod is gone, once the runner ended the stream
(it is complete: a pod that still exists, a replacement pod, are not asked), and when a
reader starts on a stream longer than one chunk: a real kubelet rotates container logs (10 MiB on GKE) and
its log API returns only the current file, so a long pod log may be incomplete.

A multi-host job has one such log per worker (``worker``): worker k's pod carries the
label ``jobset.sigs.k8s.io/job-index=k`` and its stream is ``jobs/{id}/logs/worker-{k}/``;
``worker=None`` is a single-host job's one pod (stream worker 0).

Cursors: ``pod|{stamp}|{count}|{offset}|{started_ns}`` and ``storage|{offset}|{chunk}``;
a cursor of older versions (``{stamp}|{count}``) reads as a pod cursor at offset 0.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kinetic_core.backends.kubernetes.pod_spec import KINETIC_CONTAINER
from kinetic_core.records import layout
from kinetic_core.records.log_chunks import chunk_size, read_all, read_at, read_meta
from kinetic_core.storage import Storage

#: Lines per read from the pod (one bounded chunk), and the bytes asked of the API.
POD_LINES = 5000
POD_BYTES = 8 << 20

PodLog = Callable[..., str | None]  # (pod name, **query) -> text, None when unreadable


@dataclass
class Cursor:
    source: str = "pod"  # "pod" | "storage"
    stamp: str = ""  # pod: timestamp of the last line delivered
    count: int = 0  # pod: lines delivered with that timestamp
    offset: int = 0  # bytes of the stored stream delivered (both sources)
    started_ns: int = 0  # pod: when the stream began (0: not known yet)
    chunk: int = 0  # storage: the stream's chunk size

    @classmethod
    def parse(cls, text: str | None) -> Cursor:
        if not text:
            return cls()
        parts = text.split("|")
        if parts[0] == "storage":
            return cls("storage", offset=int(parts[1]), chunk=int(parts[2]))
        if parts[0] == "pod":
            return cls("pod", parts[1], int(parts[2]), int(parts[3]), int(parts[4]))
        return cls("pod", parts[0], int(parts[1]))  # an older version's cursor

    def __str__(self) -> str:
        if self.source == "storage":
            return f"storage|{self.offset}|{self.chunk}"
        return f"pod|{self.stamp}|{self.count}|{self.offset}|{self.started_ns}"


def stamp_ns(stamp: str) -> int:
    """RFC 3339 (the kubelet's, nanoseconds with trailing zeros trimmed) -> ns since epoch."""
    base, _, frac = stamp.rstrip("Z").partition(".")
    seconds = dt.datetime.fromisoformat(base).replace(tzinfo=dt.UTC).timestamp()
    return int(seconds) * 1_000_000_000 + int((frac or "0")[:9].ljust(9, "0"))


def runner_pod(pods: list[dict[str, Any]], meta: dict[str, Any] | None) -> str | None:
    """The name of the pod whose log holds the stream (``_runner_pod``)."""
    pod = _runner_pod(pods, meta)
    return pod["metadata"]["name"] if pod is not None else None


def _runner_pod(pods: list[dict[str, Any]], meta: dict[str, Any] | None) -> dict[str, Any] | None:
    """The pod whose log holds the stream: the oldest one created by the time the capture
    began (a replacement pod, created once the runner's was deleted, only refused to run
    the function again); without a stream, the newest pod (as before streams)."""
    pods = sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""))
    if meta is None:
        return pods[-1] if pods else None
    began = int(meta.get("started_ns") or 0) // 1_000_000_000
    pods = [p for p in pods if _created_s(p) <= began]
    return pods[0] if pods else None


def _terminated(pod: dict[str, Any]) -> bool:
    """The pod's runner container ran and ended (its log is final; sidecars may live on)."""
    status = pod.get("status") or {}
    if status.get("phase") in ("Succeeded", "Failed"):
        return True
    for one in status.get("containerStatuses") or []:
        if one.get("name") == KINETIC_CONTAINER:
            return bool((one.get("state") or {}).get("terminated"))
    return False


def _ended(meta: dict[str, Any]) -> bool:
    """The runner ended the stream: storage holds all of it (and no pod is asked)."""
    return bool(meta.get("ended_ns"))


def _created_s(pod: dict[str, Any]) -> int:
    created = pod["metadata"].get("creationTimestamp")
    return stamp_ns(created) // 1_000_000_000 if created else 0


class JobLog:
    """One job's log through one cursor (see the module docstring)."""

    def __init__(
        self,
        storage: Storage,
        job_id: str,
        pods: Callable[[], list[dict[str, Any]]],
        pod_log: PodLog,
        worker: int = 0,
    ) -> None:
        self.storage = storage
        self.job_id = job_id
        self.worker = worker
        self._pods = pods
        self._pod_log = pod_log

    def text(self, tail: int | None = None) -> str:
        """The whole log, or its last ``tail`` lines."""
        meta = read_meta(self.storage, self.job_id, self.worker)
        pod = runner_pod(self._pods(), meta)
        if meta is not None and (pod is None or _ended(meta) or self._long()):
            return read_all(self.storage, self.job_id, worker=self.worker, tail=tail)
        if pod is None:
            return ""
        return self._pod_log(pod, tailLines=tail) or ""

    def complete(self) -> bool:
        """No more output will be written to this log: the runner ended its stream, or its
        pod's container terminated (the pod's log is final), or there is neither a stream
        nor a pod (the worker never ran, or its pod is gone with no stream kept). A stream
        begun but not ended with its pod gone is not complete: its last chunks may still be
        on their way to storage. Asked before the reads that drain the log, so whatever a
        complete log holds is read by them."""
        meta = read_meta(self.storage, self.job_id, self.worker)
        if meta is not None and _ended(meta):
            return True
        pod = _runner_pod(self._pods(), meta)
        if pod is None:
            return meta is None
        return _terminated(pod)

    def read(self, cursor: str | None) -> tuple[str, str | None]:
        """New output since ``cursor`` (a bounded chunk) and the cursor after it."""
        pos = Cursor.parse(cursor)
        if pos.source == "storage":
            return self._from_storage(pos, None)
        meta = read_meta(self.storage, self.job_id, self.worker)
        if meta is not None and (_ended(meta) or (not cursor and self._long())):
            return self._from_storage(pos, meta)  # complete (or the pod's may be rotated)
        text = self._read_pod(pos, meta)
        if text is not None:
            return text, str(pos) if text or cursor else cursor
        if pos.started_ns or meta is not None or read_meta(self.storage, self.job_id, self.worker):
            return self._from_storage(pos, meta)  # the pod is gone: storage goes on
        return "", cursor  # nothing kept yet, and no pod (not started, or never kept)

    def _long(self) -> bool:
        """More than one chunk: the pod's log may have been rotated."""
        return self.storage.exists(layout.log_chunk(self.job_id, 1, self.worker))

    def _read_pod(self, pos: Cursor, meta: dict[str, Any] | None) -> str | None:
        """Lines after ``pos`` from the runner's pod (``pos`` advanced), or None when the
        pod is gone or its log unreadable."""
        known = meta or ({"started_ns": pos.started_ns} if pos.started_ns else None)
        pod = runner_pod(self._pods(), known)
        if pod is None:
            return None
        query = {"timestamps": "true", "sinceTime": pos.stamp or None, "limitBytes": POD_BYTES}
        text = self._pod_log(pod, **query)
        if text is None:
            return None
        if not pos.started_ns:  # read after the log: a stream begun since has no line in it
            known = known or read_meta(self.storage, self.job_id, self.worker)
            pos.started_ns = int((known or {}).get("started_ns") or 0)
        return "".join(f"{line}\n" for line in _advance(pos, text))

    def _from_storage(self, pos: Cursor, meta: dict[str, Any] | None) -> tuple[str, str | None]:
        if pos.source != "storage":
            meta = meta or read_meta(self.storage, self.job_id, self.worker)
            pos = Cursor("storage", offset=pos.offset, chunk=chunk_size(meta))
        data, pos.offset = read_at(
            self.storage, self.job_id, pos.offset, chunk_bytes=pos.chunk, worker=self.worker
        )
        return data.decode("utf-8", "replace"), str(pos)


def _advance(pos: Cursor, text: str) -> list[str]:
    """The lines of a pod log read (``timestamps=true``) after ``pos``; ``pos`` moves past
    them, counting the stream's bytes of those stamped since the stream began."""
    lines = text.splitlines()
    if len(text.encode("utf-8", "replace")) >= POD_BYTES and not text.endswith("\n"):
        lines = lines[:-1]  # cut by limitBytes: the rest of that line comes next time
    since = stamp_ns(pos.stamp) if pos.stamp else 0
    out: list[str] = []
    skip = pos.count
    for line in lines:
        stamp, _, content = line.partition(" ")
        at = stamp_ns(stamp)
        if since and at < since:
            continue
        if stamp == pos.stamp and skip > 0:
            skip -= 1
            continue
        out.append(content)
        pos.count = pos.count + 1 if stamp == pos.stamp else 1
        pos.stamp = stamp
        if pos.started_ns and at >= pos.started_ns:
            pos.offset += len(content.encode("utf-8", "replace")) + 1
        if len(out) >= POD_LINES:
            break
    return out
