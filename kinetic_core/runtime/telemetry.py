"""A running job's telemetry (neuro's ``top``): sampled by the runner, kept in storage.

Every ``SAMPLE_SECONDS`` the runner's sidecar thread (``sidecar.py``) reads ``/proc`` for
its own process and its children (CPU time and resident memory; no psutil: the core
depends on cloudpickle and tenacity only) and, where the NVIDIA driver and ``pynvml``
(the ``nvml`` extra) are there, each GPU's utilisation and memory. It overwrites one small
record per worker, ``jobs/{id}/telemetry/worker-{k}.json``: the latest sample and a short
window of the ones before. Nothing is invented: a value that cannot be read is None, and
``gpus`` is None (with ``gpu_note``) where NVML is not available.

``JobHandle.top()`` reads those records (bound to the job, signed when a key is set).
"""

from __future__ import annotations

import os
import sys
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

from kinetic_core.records import layout
from kinetic_core.runtime.signals import read_bound, signed
from kinetic_core.storage import Storage

#: Seconds between samples (``KINETIC_TELEMETRY_SECONDS``).
SAMPLE_SECONDS = 5.0
SAMPLE_ENV = "KINETIC_TELEMETRY_SECONDS"
#: Samples kept in each record's rolling window (the latest one included).
WINDOW = 12
NO_NVML = "no GPU telemetry: NVML not available"


@dataclass(frozen=True)
class GpuSample:
    """One GPU as NVML sees it from inside the job's container."""

    index: int
    name: str
    utilization_percent: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None


@dataclass(frozen=True)
class WorkerSample:
    """Worker ``worker``'s latest sample. ``cpu_percent`` is of one core (200 = two busy
    cores), over the last interval, of the function's process and its children (None in
    the first sample); ``gpus`` is None where NVML is not available (``gpu_note`` says so).
    ``window``: the recent samples, oldest first, as ``{at, cpu_percent, rss_bytes}``."""

    worker: int
    at: float
    cpu_percent: float | None
    rss_bytes: int | None
    gpus: list[GpuSample] | None
    gpu_note: str = ""
    interval: float = SAMPLE_SECONDS
    window: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class JobTop:
    """What ``JobHandle.top()`` returns: the job's status, one sample per worker that has
    written one, and ``note`` (why there is none yet, or that the job ended and these
    are its last samples, or that there is no GPU telemetry)."""

    job_id: str
    status: str
    workers: list[WorkerSample]
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "status": self.status,
            "workers": [w.to_dict() for w in self.workers],
            "note": self.note,
        }


# ---- sampling (the runner's side) ---------------------------------------------------------


def _stat(pid: int) -> tuple[int, int] | None:
    """(CPU ticks of ``pid`` and of its reaped children, resident pages) from /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            rest = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # fields 14-17 (utime, stime, cutime, cstime) and 24 (rss); rest[0] is field 3
    return sum(int(x) for x in rest[11:15]), int(rest[21])


def _children(pid: int) -> list[int]:
    """Live children of ``pid`` (every thread's ``children`` file)."""
    found: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                found.extend(int(x) for x in fh.read().split())
        except OSError:
            continue
    return found


def process_tree(root: int) -> tuple[int, int] | None:
    """Total CPU ticks and resident pages of ``root`` and its descendants, or None when
    /proc cannot tell (not Linux)."""
    own = _stat(root)
    if own is None:
        return None
    ticks, pages = own
    todo, seen = _children(root), {root}
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        got = _stat(pid)
        if got is not None:  # it may have ended between the two reads
            ticks, pages = ticks + got[0], pages + got[1]
            todo.extend(_children(pid))
    return ticks, pages


_nvml_missing = False  # this process found no pynvml to import (and none was added since)


def nvml_module() -> Any:
    """``pynvml`` (the `nvml` extra: nvidia-ml-py), or None where it is not installed.
    A failed import is not tried again: the local zygote asks before it forks jobs, so a
    job on a machine without it does not search ``sys.path`` for it at its last sample."""
    global _nvml_missing
    if _nvml_missing and "pynvml" not in sys.modules:
        return None
    try:
        import pynvml
    except ImportError:
        _nvml_missing = True
        return None
    return pynvml


class Gpus:
    """NVML, initialised once and lazily; ``read()`` is None where it is not available."""

    def __init__(self) -> None:
        self.nvml: Any = None
        self.note = ""
        pynvml = nvml_module()
        try:
            if pynvml is not None:
                pynvml.nvmlInit()  # per process: NVML's state does not survive a fork
                self.nvml = pynvml
        except Exception:  # no driver, no device: nothing to read
            pass
        if self.nvml is None:
            self.note = NO_NVML

    def read(self) -> list[GpuSample] | None:
        if self.nvml is None:
            return None
        nv, found = self.nvml, []
        try:
            count = nv.nvmlDeviceGetCount()
        except Exception:
            return None
        for i in range(count):
            found.append(self._one(nv, i))
        return found

    @staticmethod
    def _one(nv: Any, i: int) -> GpuSample:
        """Each value on its own: one NVML refuses (MIG, permissions) stays None."""
        h = _ask(nv.nvmlDeviceGetHandleByIndex, i)
        raw = _ask(nv.nvmlDeviceGetName, h)
        util = _ask(nv.nvmlDeviceGetUtilizationRates, h)
        mem = _ask(nv.nvmlDeviceGetMemoryInfo, h)
        return GpuSample(
            i,
            raw.decode() if isinstance(raw, bytes) else str(raw or ""),
            None if util is None else float(util.gpu),
            None if mem is None else int(mem.used),
            None if mem is None else int(mem.total),
        )


def _ask(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:
        return None


class Sampler:
    """Samples this process's tree and writes worker ``worker``'s record."""

    def __init__(self, storage: Storage, job_id: str, worker: int, signing_key: str | None) -> None:
        self.storage, self.job_id, self.worker, self.key = storage, job_id, worker, signing_key
        self.interval = float(os.environ.get(SAMPLE_ENV) or SAMPLE_SECONDS)
        self.tick_hz = os.sysconf("SC_CLK_TCK")
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.gpus: Gpus | None = None  # NVML starts in the sidecar thread, not before the job
        self.window: deque[dict[str, Any]] = deque(maxlen=WINDOW)
        self.last: tuple[float, int] | None = None  # (monotonic, ticks) of the last sample

    def sample(self) -> WorkerSample:
        now, tree = time.monotonic(), process_tree(os.getpid())
        cpu = rss = None
        if tree is not None:
            ticks, pages = tree
            rss = pages * self.page
            if self.last is not None and now > self.last[0]:
                used = max(0, ticks - self.last[1]) / self.tick_hz
                cpu = round(100.0 * used / (now - self.last[0]), 1)
            self.last = (now, ticks)
        point: dict[str, Any] = {"at": time.time(), "cpu_percent": cpu, "rss_bytes": rss}
        self.window.append(point)
        self.gpus = self.gpus or Gpus()
        return WorkerSample(
            self.worker,
            point["at"],
            cpu,
            rss,
            self.gpus.read(),
            self.gpus.note,
            self.interval,
            list(self.window),
        )

    def write(self) -> None:
        fields = {"job_id": self.job_id, **self.sample().to_dict()}
        self.storage.write_bytes(
            layout.telemetry_record(self.job_id, self.worker), signed(fields, self.key)
        )


# ---- reading (the client's side) ----------------------------------------------------------


def read_sample(
    storage: Storage, job_id: str, worker: int, signing_key: str | None
) -> tuple[WorkerSample | None, str]:
    """Worker ``worker``'s record as a WorkerSample, or (None, why) (why: "" if absent)."""
    data, problem = read_bound(
        storage, layout.telemetry_record(job_id, worker), job_id, signing_key
    )
    if data is None:
        return None, problem
    try:
        gpus = data.get("gpus")
        return WorkerSample(
            worker=int(data["worker"]),
            at=float(data["at"]),
            cpu_percent=data.get("cpu_percent"),
            rss_bytes=data.get("rss_bytes"),
            gpus=None if gpus is None else [GpuSample(**g) for g in gpus],
            gpu_note=str(data.get("gpu_note") or ""),
            interval=float(data.get("interval") or SAMPLE_SECONDS),
            window=list(data.get("window") or []),
        ), ""
    except (KeyError, TypeError, ValueError) as exc:
        return None, f"it cannot be read ({exc})"


def read_top(
    storage: Storage, job_id: str, workers: int, status: str, signing_key: str | None
) -> JobTop:
    """Every worker's latest sample and a note saying what they mean."""
    samples, notes = [], []
    for k in range(workers):
        got, problem = read_sample(storage, job_id, k, signing_key)
        if got is not None:
            samples.append(got)
        elif problem:
            where = storage.location(layout.telemetry_record(job_id, k))
            notes.append(f"worker {k}'s telemetry {where} is ignored: {problem}")
    notes.insert(0, _status_note(status, samples))
    if any(s.gpus is None for s in samples):
        notes.append(NO_NVML)
    return JobTop(job_id, status, samples, "; ".join(n for n in notes if n))


def _status_note(status: str, samples: list[WorkerSample]) -> str:
    if status == "PENDING":
        return "the job has not started: no telemetry yet"
    if status == "RUNNING":
        return "" if samples else f"no sample yet: the runner writes one every {SAMPLE_SECONDS:g} s"
    if not samples:
        return f"the job is {status} and left no telemetry"
    last = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(max(s.at for s in samples)))
    return f"the job is {status}: these are its last samples (at {last})"
