"""Recovery on the local backend: a Lost job (supervisor and runner SIGKILLed) restarts
as the next attempt of its key, from its checkpoint, exactly once however many observe it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import kinetic_core as kc
from kinetic_core.records import layout
from tests.core import jobfns

ROOT = Path(__file__).resolve().parents[2]


def _wait_for(path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _until(check: Any, timeout: float = 60) -> Any:
    """Poll ``check`` until it returns something truthy (no timing asserted)."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"{check.__name__} never held"
        time.sleep(0.2)
    return value


def _kill_job(storage_uri: str, job_id: str) -> None:
    """SIGKILL the job's supervisor and runner at once (their process group): no exit is
    recorded, as when the machine restarts."""
    root = Path(storage_uri[len("file://") :])
    launch = json.loads((root / "backend-local" / job_id / "launch.json").read_text())
    os.killpg(launch["pid"], signal.SIGKILL)


def _observers(storage_uri: str, job_id: str, n: int) -> list[subprocess.Popen[str]]:
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(ROOT)!r})
        import kinetic_core as kc
        state = kc.attach({job_id!r}).wait(timeout=120)
        print(json.dumps(state.to_dict()))
        """
    )
    env = {**os.environ, "KINETIC_STORAGE": storage_uri}
    return [
        subprocess.Popen(
            [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT
        )
        for _ in range(n)
    ]


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_lost_job_recovers_once_from_its_checkpoint_with_ten_observers(
    storage_uri: str, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    job = kc.submit(
        jobfns.resumable,
        (str(work), 10),
        target=kc.Target(max_recoveries=1),
        idempotency_key="nightly-train",
    )
    _wait_for(work / "halfway")
    _kill_job(storage_uri, job.job_id)

    procs = _observers(storage_uri, job.job_id, 10)
    states = [json.loads(p.communicate(timeout=180)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    successor = kc.attach(job.job_id).state().job_id
    assert successor != job.job_id
    assert {s["status"] for s in states} == {"SUCCEEDED"}
    assert {s["job_id"] for s in states} == {successor}
    assert {s["recoveries"] for s in states} == {1}
    assert {s["attempt"] for s in states} == {2}

    # Exactly one new attempt: two jobs in storage, two starts, one run to the end.
    root = Path(storage_uri[len("file://") :])
    assert sorted(os.listdir(root / layout.JOBS)) == sorted([job.job_id, successor])
    starts = _lines(work / "starts")
    assert starts == [f"{job.job_id} 0", f"{successor} 5"]  # resumed from its checkpoint
    assert _lines(work / "completions") == [successor]

    # The original handle follows the recovery: its result is the new attempt's.
    assert job.result(timeout=60, cleanup=False) == {"resumed_from": 5, "job_id": successor}
    state = job.state()
    assert (state.status, state.recoveries, state.attempt) == (kc.JobStatus.SUCCEEDED, 1, 2)
    assert state.lost_seconds > 0

    # Following the log goes on into the recovered attempt's log.
    lines = list(kc.attach(job.job_id).follow_logs(timeout=60))
    assert f"{job.job_id} starts at step 0" in lines
    assert f"{successor} starts at step 5" in lines

    # The history tells the whole story, attempt by attempt.
    seen = [(t.attempt, t.status.value, t.reason) for t in job.history()]
    assert (1, "FAILED", "Lost") in seen
    assert seen[-1] == (2, "SUCCEEDED", None)
    assert seen.index((1, "FAILED", "Lost")) < seen.index((2, "SUCCEEDED", None))
    # A resubmission of the key reattaches to the recovered attempt (no new job).
    again = kc.submit(
        jobfns.resumable,
        (str(work), 10),
        target=kc.Target(max_recoveries=1),
        idempotency_key="nightly-train",
        reuse_succeeded=True,
    )
    assert again.job_id == successor

    # Cleaning up the recovered job frees every attempt's envelopes (records stay).
    job.result(timeout=60)
    for attempt in (job.job_id, successor):
        assert not (root / layout.job_file(attempt, layout.PAYLOAD)).exists()
        assert (root / layout.job_file(attempt, layout.HANDLE)).exists()


def test_without_a_recovery_budget_lost_stays_failed(storage_uri: str, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    job = kc.submit(jobfns.resumable, (str(work), 10))  # local default: max_recoveries=0
    _wait_for(work / "halfway")
    _kill_job(storage_uri, job.job_id)
    state = job.wait(timeout=60)
    assert (state.status, state.reason, state.recoveries) == (kc.JobStatus.FAILED, "Lost", 0)
    assert state.job_id == job.job_id
    root = Path(storage_uri[len("file://") :])
    assert os.listdir(root / layout.JOBS) == [job.job_id]


def test_listed_exit_code_recovers_and_budget_exhaustion_fails_with_history(
    storage_uri: str, tmp_path: Path
) -> None:
    """Exit code 75 asks for a restart; the attempt after it succeeds. With a budget of 1
    and a job that keeps asking, the second end is final: FAILED with the exit code."""
    work = tmp_path / "work"
    work.mkdir()
    target = kc.Target(max_recoveries=1, recover_on_exit_codes=[75])
    job = kc.submit(jobfns.resumable, (str(work), 10, 75), target=target)
    assert job.result(timeout=120, cleanup=False)["resumed_from"] == 5
    assert job.state().recoveries == 1

    stubborn = tmp_path / "stubborn"
    stubborn.mkdir()
    job = kc.submit(jobfns.exit_with, (75,), target=target)
    state = job.wait(timeout=120)
    assert (state.status, state.exit_code, state.recoveries) == (kc.JobStatus.FAILED, 75, 1)
    ends = [(t.attempt, t.status.value, t.exit_code) for t in job.history() if t.status.terminal]
    assert ends == [(1, "FAILED", 75), (2, "FAILED", 75)]
    with pytest.raises(SystemExit):
        job.result(timeout=10)


def test_bad_recovery_policy_is_refused_before_anything_is_written(storage_uri: str) -> None:
    for bad in ({"max_recoveries": -1}, {"max_recoveries": "3"}, {"recover_on_exit_codes": [0]}):
        with pytest.raises(kc.ConfigError, match=r"max_recoveries|recover_on_exit_codes"):
            kc.submit(jobfns.add, (1, 2), target=kc.Target(**bad))
    root = Path(storage_uri[len("file://") :])
    assert not (root / layout.JOBS).exists() or not os.listdir(root / layout.JOBS)


def test_signed_job_on_gcs_recovers_with_a_re_signed_payload(
    gcs_emulator: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Object storage (create-only through generation preconditions) and a signing key:
    the observer verifies attempt 1's call, re-binds it to attempt 2 and signs it; the
    runner of attempt 2 verifies it. Without the key, the observer does not recover and
    does not read the job ended either (issue 34: it would flip to SUCCEEDED once an
    observer with the key recovers it): PENDING ``Recovering``, saying what it lacks."""
    from kinetic_core.records.envelope import read_summary
    from kinetic_core.storage import open_storage

    uri = gcs_emulator.uri(f"r-{uuid.uuid4().hex[:12]}")
    monkeypatch.setenv("KINETIC_STORAGE", uri)
    monkeypatch.setenv("KINETIC_LOCAL_DIR", str(tmp_path / "local"))
    monkeypatch.setenv("KINETIC_SIGNING_KEY", "s3cret")
    work = tmp_path / "work"
    work.mkdir()
    job = kc.submit(jobfns.resumable, (str(work), 10), target=kc.Target(max_recoveries=1))
    _wait_for(work / "halfway")
    launch = json.loads((tmp_path / "local" / job.job_id / "launch.json").read_text())
    os.killpg(launch["pid"], signal.SIGKILL)

    monkeypatch.delenv("KINETIC_SIGNING_KEY")
    unsigned = kc.attach(job.job_id)  # cannot verify: no recovery, and no end either

    def blocked() -> kc.JobState | None:
        state = unsigned.state()
        assert not state.terminal, state
        return state if state.reason == "Recovering" else None

    seen = _until(blocked)
    assert (seen.status, seen.recoveries) == (kc.JobStatus.PENDING, 0)
    assert "KINETIC_SIGNING_KEY" in (seen.message or ""), seen
    monkeypatch.setenv("KINETIC_SIGNING_KEY", "s3cret")
    with ThreadPoolExecutor(10) as pool:  # ten observers race on the emulator's preconditions
        states = list(pool.map(lambda _: kc.attach(job.job_id).wait(timeout=120), range(10)))
    assert {(s.status, s.recoveries) for s in states} == {(kc.JobStatus.SUCCEEDED, 1)}
    successor = job.state().job_id
    assert {s.job_id for s in states} == {successor}
    prefix = uri.split("/", 3)[3] + "/jobs/"  # the emulator serves other tests' roots too
    jobs = {n.split("/")[2] for n in gcs_emulator.server.object_names() if n.startswith(prefix)}
    assert jobs == {job.job_id, successor}
    assert kc.attach(job.job_id).result(timeout=120, cleanup=False)["resumed_from"] == 5
    header = read_summary(open_storage(uri), layout.job_file(successor, layout.PAYLOAD))
    assert header["job_id"] == successor and header["hmac"]


@pytest.mark.parametrize("key", [None, "nightly/train"])
def test_a_recovered_attempt_starts_with_the_checkpoint_in_its_output_folder(
    storage_uri: str, key: str | None
) -> None:
    """The user's pattern: checkpoint into KINETIC_OUTPUT_DIR, resume if the file is
    there. With or without an idempotency key (a job without one recovers under a derived
    key whose attempt 1 is the job itself)."""
    target = kc.Target(max_recoveries=1, recover_on_exit_codes=[75])
    job = kc.submit(jobfns.resumable_in_outputs, (10, 75), target=target, idempotency_key=key)
    value = job.result(timeout=120, cleanup=False)
    assert job.state().recoveries == 1
    assert value["resumed_from"] == 5 and value["job_id"] != job.job_id


def test_an_old_attempt_still_stopping_reads_recovering_not_ended(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the ended attempt's processes still stop, its successor waits and the job
    reads PENDING ``Recovering``: never the terminal end of an attempt that will recover
    (``OldAttemptRunning`` is a KineticError, and must not be taken for a failed recovery)."""
    from kinetic_core.control import recovery

    job = kc.submit(
        jobfns.exit_with, (75,), target=kc.Target(max_recoveries=1, recover_on_exit_codes=[75])
    )

    def still_stopping(backend: Any, ref: Any) -> None:
        raise recovery.OldAttemptRunning(f"attempt {ref.attempt} is still stopping")

    monkeypatch.setattr(recovery, "_stop_old_attempt", still_stopping)
    deadline = time.monotonic() + 60
    while (state := job.state()).reason != "Recovering" and time.monotonic() < deadline:
        assert not state.terminal, state
        time.sleep(0.05)
    assert (state.status, state.reason) == (kc.JobStatus.PENDING, "Recovering")
    monkeypatch.undo()
    assert job.wait(timeout=60).recoveries == 1  # once the old attempt is gone, it recovers
