"""A signing key changed inside a running process (issue 25, case 10).

A long-lived triggerer or worker sees its secret rotated (or removed) in its environment:
every job submitted afterwards is signed with the key in force at its submit, and every
process that touches it (submitter, zygote, supervisor, runner, observers) signs and
verifies it with that same key. Real detached jobs on the local backend, zygote included.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.backends import get_backend
from kinetic_core.backends.local import LocalBackend
from kinetic_core.control.polling import poll_ticks
from tests.core import jobfns

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("zygote", ["1", "0"])  # forked by a warm zygote, or a fresh interpreter
def test_jobs_submitted_after_the_env_key_rotates_or_goes_run(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch, zygote: str
) -> None:
    monkeypatch.setenv("KINETIC_LOCAL_ZYGOTE", zygote)
    monkeypatch.setenv("KINETIC_SIGNING_KEY", "key-a")
    assert kc.submit(jobfns.add, (1, 2)).result(timeout=60) == 3

    monkeypatch.setenv("KINETIC_SIGNING_KEY", "key-b")  # rotated under the running process
    rotated = kc.submit(jobfns.add, (2, 3))
    assert rotated.result(timeout=60) == 5
    assert rotated.state().status is kc.JobStatus.SUCCEEDED

    monkeypatch.delenv("KINETIC_SIGNING_KEY")  # removed: jobs run unsigned
    unsigned = kc.submit(jobfns.add, (3, 4))
    assert unsigned.result(timeout=60) == 7
    assert unsigned.state().status is kc.JobStatus.SUCCEEDED


def test_a_job_in_flight_when_the_key_rotates_is_observed_and_collected_with_its_key(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The handle submit returned holds the key in force at submit: after the environment
    moved on, this process still observes the job as running (not Lost: that would start
    a recovery beside it) and collects its value."""
    monkeypatch.setenv("KINETIC_SIGNING_KEY", "key-a")
    go, ready = tmp_path / "go", tmp_path / "ready"
    job = kc.submit(jobfns.wait_for_file, (str(go), "done", str(ready)))
    for _ in poll_ticks(interval=0.05, timeout=60, describe=lambda: "the job to start"):
        if ready.exists():
            break
    monkeypatch.setenv("KINETIC_SIGNING_KEY", "key-b")
    assert job.state().status is kc.JobStatus.RUNNING
    go.touch()
    assert job.result(timeout=60) == "done"


def test_an_explicit_key_is_used_whatever_the_env_says(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A target's own key wins over the environment, before and after it changes."""
    monkeypatch.setenv("KINETIC_SIGNING_KEY", "env-key")
    target = kc.Target(signing_key="explicit-key")
    assert kc.submit(jobfns.add, (1, 1), target=target).result(timeout=60) == 2
    monkeypatch.setenv("KINETIC_SIGNING_KEY", "other-env-key")
    job = kc.submit(jobfns.add, (2, 2), target=target)
    assert job.result(timeout=60) == 4


def test_the_local_backend_is_cached_on_the_key_in_force(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Observers build their backend from a stored target, which carries no key: the
    instance they get holds the key the environment holds now, not the first one read."""
    stored = kc.Target(backend="local", storage=storage_uri)
    monkeypatch.setenv("KINETIC_SIGNING_KEY", "key-a")
    first = get_backend(stored)
    assert isinstance(first, LocalBackend) and first.signing_key == "key-a"
    assert get_backend(stored) is first
    assert get_backend(replace(stored, signing_key="key-a")) is first  # same key in force
    monkeypatch.setenv("KINETIC_SIGNING_KEY", "key-b")
    assert getattr(get_backend(stored), "signing_key", None) == "key-b"
    monkeypatch.delenv("KINETIC_SIGNING_KEY")
    assert getattr(get_backend(stored), "signing_key", "unset") is None


def test_an_observer_verifies_a_job_launched_elsewhere_with_the_key_in_force(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job launched by another process under key a: this process accepts its launch
    record while it holds key a, refuses it once its key moved on (it cannot tell the
    record from a forgery), and accepts it again with key a."""
    env = {**os.environ, "KINETIC_SIGNING_KEY": "key-a", "KINETIC_STORAGE": storage_uri}
    code = (
        "import kinetic_core as kc; from tests.core import jobfns; "
        "job = kc.submit(jobfns.add, (1, 2)); job.wait(timeout=60); print(job.to_json())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    job = kc.JobHandle.from_json(out.stdout.strip().splitlines()[-1])
    stored = kc.Target.from_stored(job.target)

    def phase() -> tuple[str, str]:
        state = get_backend(stored).poll([job.job_id])[job.job_id]
        return state.phase, state.message or ""

    monkeypatch.setenv("KINETIC_SIGNING_KEY", "key-a")
    # wait() returns once the runner decided; its supervisor records the exit just after.
    for _ in poll_ticks(interval=0.05, timeout=30, describe=lambda: "the job's exit record"):
        if phase()[0] != "running":
            break
    assert phase()[0] == "exited"
    monkeypatch.setenv("KINETIC_SIGNING_KEY", "key-b")
    assert phase() == (
        "gone",
        "the job's launch record is refused: its signature does not match the signing key",
    )
    monkeypatch.setenv("KINETIC_SIGNING_KEY", "key-a")
    assert phase()[0] == "exited"


def test_a_handle_given_the_job_key_observes_it_whatever_the_env_holds(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A job launched by another process under key a, observed here through a handle
    given key a while this process's environment holds key b: it reads RUNNING and its
    value is collected (before: the backend verified its launch record with key b, so the
    running job read FAILED/Lost)."""
    go, ready = tmp_path / "go", tmp_path / "ready"
    env = {**os.environ, "KINETIC_SIGNING_KEY": "key-a", "KINETIC_STORAGE": storage_uri}
    code = (
        "import kinetic_core as kc; from tests.core import jobfns; "
        f"job = kc.submit(jobfns.wait_for_file, ({str(go)!r}, 'done', {str(ready)!r})); "
        "print(job.to_json())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    monkeypatch.setenv("KINETIC_SIGNING_KEY", "key-b")
    job = kc.JobHandle.from_json(out.stdout.strip().splitlines()[-1], signing_key="key-a")
    for _ in poll_ticks(interval=0.05, timeout=60, describe=lambda: "the job to start"):
        if ready.exists():
            break
    assert job.state().status is kc.JobStatus.RUNNING
    go.touch()
    assert job.result(timeout=60) == "done"
