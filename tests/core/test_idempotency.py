"""Idempotent submit: one key, many concurrent submitters, exactly one job per attempt."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

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
        kc.submit(jobfns.sleep, (0.5, "a"), idempotency_key="nightly/train/2026-11-21").job_id
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


def test_a_keyed_submit_of_another_call_is_told_so(storage_uri: str, tmp_path: Path) -> None:
    """Issue 35 item 3: the same key with another function or other arguments raised
    nothing and returned the old job (and so its value)."""
    gate = tmp_path / "go"
    first = kc.submit(jobfns.wait_for_file, (str(gate), "first"), idempotency_key="k/other")
    before = _job_dirs(storage_uri)
    with pytest.raises(kc.IdempotencyConflict, match="other arguments") as other_args:
        kc.submit(jobfns.wait_for_file, (str(gate), "second"), idempotency_key="k/other")
    assert other_args.value.job_id == first.job_id
    assert "reattach_any=True" in str(other_args.value)
    with pytest.raises(kc.IdempotencyConflict, match="another function"):
        kc.submit(jobfns.add, (1, 2), idempotency_key="k/other")
    assert _job_dirs(storage_uri) == before  # nothing written
    again = kc.submit(jobfns.add, (1, 2), idempotency_key="k/other", reattach_any=True)
    assert again.job_id == first.job_id and again.reattached
    same = kc.submit(
        jobfns.wait_for_file, [str(gate)], {"value": "first"}, idempotency_key="k/other"
    )
    assert same.job_id == first.job_id  # the same call, spelled with a keyword
    gate.touch()
    assert first.result(timeout=60) == "first"
    assert kc.submit(jobfns.add, (1, 2), idempotency_key="k/other").attempt == 2


def test_the_same_call_from_another_process_reattaches(storage_uri: str, tmp_path: Path) -> None:
    """An orchestrator retry resubmits the same call from another process, where set order
    differs (PYTHONHASHSEED): it still reattaches."""
    gate = tmp_path / "go"
    value = {"tags": {"a", "b", "c", "d", "e"}, "n": 1}
    first = kc.submit(jobfns.wait_for_file, (str(gate), value), idempotency_key="k/retry")
    script = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        import kinetic_core as kc
        from tests.core import jobfns
        value = {{"tags": {{"e", "d", "c", "b", "a"}}, "n": 1}}
        print(kc.submit(jobfns.wait_for_file, ({str(gate)!r}, value), idempotency_key="k/retry").job_id)
        """
    )
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == first.job_id
    gate.touch()
    assert first.result(timeout=60) == value
