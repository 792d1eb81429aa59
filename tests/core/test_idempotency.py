"""Idempotent submit: one key, many concurrent submitters, exactly one job per attempt."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import kinetic_core as kc
from tests.core import jobfns

ROOT = Path(__file__).resolve().parents[2]


def _job_dirs(storage_uri: str) -> list[str]:
    return sorted(p.name for p in Path(storage_uri[7:], "jobs").iterdir())


def test_same_key_returns_running_job_then_new_attempt_after_failure(storage_uri: str) -> None:
    first = kc.submit(jobfns.sleep, (0.5, "a"), idempotency_key="nightly/train/2026-11-21")
    again = kc.submit(jobfns.sleep, (0.5, "a"), idempotency_key="nightly/train/2026-11-21")
    assert again.job_id == first.job_id and first.attempt == 1
    first.wait(timeout=30)
    # Succeeded but not collected: still the same job.
    assert (
        kc.submit(jobfns.sleep, (0.5,), idempotency_key="nightly/train/2026-11-21").job_id
        == first.job_id
    )
    assert first.result(timeout=30) == "a"
    # Collected: a new run of the same key is a new attempt.
    second = kc.submit(jobfns.fail, ("boom",), idempotency_key="nightly/train/2026-11-21")
    assert second.attempt == 2 and second.job_id != first.job_id
    second.wait(timeout=30)
    third = kc.submit(jobfns.add, (1, 1), idempotency_key="nightly/train/2026-11-21")
    assert third.attempt == 3
    assert third.result(timeout=30) == 2


def test_reuse_succeeded_keeps_collected_result(storage_uri: str) -> None:
    job = kc.submit(jobfns.add, (2, 3), idempotency_key="flow/1/task")
    assert job.result(timeout=30, cleanup=False) == 5
    again = kc.submit(jobfns.add, (2, 3), idempotency_key="flow/1/task", reuse_succeeded=True)
    assert again.job_id == job.job_id
    assert again.result(timeout=30) == 5


def test_fifty_threads_one_key_one_job(storage_uri: str) -> None:
    barrier = threading.Barrier(50)
    ids: list[str] = []
    errors: list[BaseException] = []

    def submit() -> None:
        barrier.wait()
        try:
            ids.append(kc.submit(jobfns.sleep, (1.0,), idempotency_key="race-threads").job_id)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=submit) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert len(set(ids)) == 1 and len(ids) == 50
    assert _job_dirs(storage_uri) == ids[:1]
    assert kc.attach(ids[0]).wait(timeout=60).status is kc.JobStatus.SUCCEEDED


def test_fifty_processes_one_key_one_job(storage_uri: str, tmp_path: Path) -> None:
    go = tmp_path / "go"
    script = textwrap.dedent(
        f"""
        import os, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        import kinetic_core as kc
        from tests.core import jobfns
        while not os.path.exists({str(go)!r}):
            time.sleep(0.005)
        print(kc.submit(jobfns.sleep, (1.0,), idempotency_key="race-procs").job_id)
        """
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(50)
    ]
    go.touch()
    outs = [p.communicate(timeout=240) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs if err][:2]
    ids = {out.strip() for out, _ in outs}
    assert len(ids) == 1
    assert _job_dirs(storage_uri) == sorted(ids)


def test_mark_collected_lets_the_key_run_again(storage_uri: str) -> None:
    """A result passed on by reference counts as delivered: the next submit is a new attempt."""
    first = kc.submit(jobfns.add, (1, 2), idempotency_key="by-reference")
    first.wait(timeout=60)
    assert kc.submit(jobfns.add, (1, 2), idempotency_key="by-reference").job_id == first.job_id
    first.mark_collected()
    second = kc.submit(jobfns.add, (1, 2), idempotency_key="by-reference")
    assert second.attempt == 2
    assert first.result(timeout=60, cleanup=False) == 3  # the result itself is still there
    assert second.result(timeout=60) == 3
