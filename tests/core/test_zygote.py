"""The local zygote: a warm process forks job supervisors; jobs must not notice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.backends.local import zygote
from tests.core import jobfns

ROOT = Path(__file__).resolve().parents[2]


def _zygote_pid() -> int:
    path = zygote.socket_path()
    assert path is not None
    return int(Path(f"{path}.pid").read_text())


@pytest.mark.parametrize("mode", ["1", "0"])
def test_round_trip_with_and_without_zygote(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setenv("KINETIC_LOCAL_ZYGOTE", mode)
    job = kc.submit(jobfns.echo_env, ("KINETIC_LOCAL_ZYGOTE",))
    assert job.result(timeout=60) == {"KINETIC_LOCAL_ZYGOTE": mode}


def test_jobs_survive_the_zygote_and_a_new_one_starts(storage_uri: str, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    running = kc.submit(jobfns.pid_then_sleep, (str(pid_file), 2))
    old = _zygote_pid()
    os.kill(old, signal.SIGKILL)
    assert running.wait(timeout=60).status is kc.JobStatus.SUCCEEDED  # unaffected
    assert kc.submit(jobfns.add, (20, 22)).result(timeout=60) == 42  # a fresh zygote
    assert _zygote_pid() != old


def test_each_job_gets_its_own_submitters_directory_and_environment(
    storage_uri: str, tmp_path: Path
) -> None:
    """A zygote started by one submitter must not leak its cwd or env into another's jobs."""
    script = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        import kinetic_core as kc
        from tests.core import jobfns
        job = kc.submit(jobfns.echo_env, ("MARKER",))
        print(job.result(timeout=60)["MARKER"], flush=True)
        """
    )
    outputs = []
    for marker in ("first", "second"):
        workdir = tmp_path / marker
        workdir.mkdir()
        env = {**os.environ, "MARKER": marker}
        proc = subprocess.run(
            [sys.executable, "-c", script],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        outputs.append(proc.stdout.strip())
    assert outputs == ["first", "second"]


def test_socket_directory_must_be_private(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("tempfile.gettempdir", lambda: str(tmp_path))
    directory = tmp_path / f"kinetic-{os.getuid()}"
    directory.mkdir(mode=0o777)
    directory.chmod(0o777)
    assert zygote.socket_path() is None  # too open: no zygote, jobs start fresh interpreters
    directory.chmod(0o700)
    assert zygote.socket_path() is not None
