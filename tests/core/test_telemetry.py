"""``JobHandle.top()`` on real local jobs: the runner's samples of its own process
(resident memory it really holds, CPU it really burns), an ended job's last samples, no
GPU fields invented without NVML, and ``kinetic jobs top``."""

from __future__ import annotations

import json
import sys
import types
from collections.abc import Callable
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.cli import main
from kinetic_core.control.polling import poll_ticks
from kinetic_core.records import layout
from kinetic_core.runtime import telemetry
from kinetic_core.storage import open_storage
from tests.core import jobfns, signalfns

MB = 1 << 20


@pytest.fixture(autouse=True)
def quick_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(telemetry.SAMPLE_ENV, "0.3")


def until(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    for _ in poll_ticks(interval=0.2, timeout=timeout, describe=lambda: what):
        if check():
            return


def test_top_shows_the_memory_the_function_holds_and_its_cpu(
    storage_uri: str, tmp_path: Path
) -> None:
    stop = tmp_path / "stop"
    job = kc.submit(signalfns.busy_holding, (100, str(stop)))
    seen: list[kc.JobTop] = []

    def busy_sample() -> bool:
        seen.append(job.top())
        w = seen[-1].workers
        return bool(w) and (w[0].rss_bytes or 0) >= 100 * MB and (w[0].cpu_percent or 0) > 0

    until(busy_sample, "a sample of the busy job")
    now = seen[-1]
    assert now.status == "RUNNING" and now.workers[0].worker == 0
    assert len(now.workers[0].window) >= 2  # the rolling window keeps the earlier samples
    assert now.workers[0].gpus is None and telemetry.NO_NVML in now.note  # nothing invented
    stop.touch()
    assert job.result(timeout=60, cleanup=False) >= 100 * MB
    ended = job.top()
    assert ended.status == "SUCCEEDED" and "last samples" in ended.note
    assert ended.workers and (ended.workers[0].rss_bytes or 0) > 0


def test_a_job_that_ended_before_sampling_says_so_and_a_forged_sample_is_ignored(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KINETIC_SIGNING_KEY", "k" * 32)
    job = kc.submit(jobfns.add, (1, 2))
    assert job.result(timeout=60, cleanup=False) == 3
    assert job.top().workers  # stopping the sidecar writes a last sample
    storage = open_storage(storage_uri)
    record = layout.telemetry_record(job.job_id, 0)
    forged = json.loads(storage.read_bytes(record))
    forged["rss_bytes"] = 1
    storage.write_bytes(record, json.dumps(forged).encode())
    top = job.top()
    assert top.workers == [] and "is ignored" in top.note and "left no telemetry" in top.note


def test_cli_top_table_and_json(storage_uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    job = kc.submit(jobfns.add, (1, 2))
    job.wait(timeout=60)
    assert main(["jobs", "top", job.job_id, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["job_id"] == job.job_id and data["status"] == "SUCCEEDED"
    assert data["workers"][0]["rss_bytes"] > 0 and data["workers"][0]["gpus"] is None
    assert main(["jobs", "top", job.job_id, "--watch"]) == 0  # ended: prints once, returns
    out = capsys.readouterr()
    assert "CPU %" in out.out and "MiB" in out.out and "NVML not available" in out.err


def test_gpu_samples_come_from_nvml_as_it_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU or driver here, so a stand-in ``pynvml`` module answers as NVML does (the
    one stand-in in this file); a value it refuses stays None, and a failing nvmlInit
    means no GPU telemetry at all."""

    class Nvml(types.ModuleType):
        fail_init = False

        def nvmlInit(self) -> None:  # NVML's own names
            if self.fail_init:
                raise RuntimeError("NVML Shared Library Not Found")

        def nvmlDeviceGetCount(self) -> int:
            return 2

        def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
            return i

        def nvmlDeviceGetName(self, h: int) -> bytes:
            return b"NVIDIA H100 80GB HBM3"

        def nvmlDeviceGetUtilizationRates(self, h: int) -> types.SimpleNamespace:
            if h == 1:
                raise RuntimeError("Not Supported")  # e.g. a MIG instance
            return types.SimpleNamespace(gpu=87, memory=40)

        def nvmlDeviceGetMemoryInfo(self, h: int) -> types.SimpleNamespace:
            return types.SimpleNamespace(used=30 << 30, total=80 << 30)

    nvml = Nvml("pynvml")
    # An earlier miss in this process (remembered: not searched for again) does not hide
    # a pynvml that is importable now.
    monkeypatch.setattr(telemetry, "_nvml_missing", True)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    gpus = telemetry.Gpus().read()
    assert gpus == [
        telemetry.GpuSample(0, "NVIDIA H100 80GB HBM3", 87.0, 30 << 30, 80 << 30),
        telemetry.GpuSample(1, "NVIDIA H100 80GB HBM3", None, 30 << 30, 80 << 30),
    ]
    nvml.fail_init = True
    absent = telemetry.Gpus()
    assert absent.read() is None and absent.note == telemetry.NO_NVML
