"""``debug=True`` on the local backend, with real processes: a failed job's runner is kept
alive (FAILED at once, its pid and folders reported) until cleanup ends it."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.cli import main
from kinetic_core.errors import ConfigError
from kinetic_core.runtime import debugging
from kinetic_core.storage import open_storage
from kinetic_core.util.procs import group_members
from tests.core import outdebug_fns


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie has ended
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"


def _until_gone(pids: list[int]) -> list[int]:
    """The pids still alive after waiting (bounded) for them to end."""
    for _ in range(600):
        alive = [p for p in pids if _alive(p)]
        if not alive:
            return []
        time.sleep(0.05)
    return alive


@pytest.mark.parametrize("via", ["handle", "cli"])
def test_a_failed_debug_job_is_kept_until_cleanup(
    storage_uri: str, via: str, capsys: pytest.CaptureFixture[str]
) -> None:
    job = kc.submit(outdebug_fns.fail_after_writing, ("state.txt",), debug=True)
    state = job.wait(timeout=60)
    assert state.status is kc.JobStatus.FAILED and state.reason == "Error"
    info = debugging.read(open_storage(storage_uri), job.job_id)
    assert info is not None
    pids = [info["runner_pid"], info["supervisor_pid"]]
    assert all(_alive(p) for p in pids)  # kept after the failure was recorded
    group = group_members(info["supervisor_pid"])  # the job's process group (its session)
    assert info["runner_pid"] in group
    assert Path(info["output_folder"], "state.txt").read_text() == "state to inspect"
    again = job.state()  # a held job reads FAILED, not RUNNING, and starts no recovery
    assert (again.status, again.job_id) == (kc.JobStatus.FAILED, job.job_id)
    assert not job.cancel()  # it ended already: cancel decides nothing
    lines = list(job.follow_logs(timeout=30))  # ends: nothing waits on a held job's log
    assert any("boom for debugging" in line for line in lines)
    assert all(_alive(p) for p in pids)

    with pytest.raises(ValueError, match="boom for debugging") as raised:
        job.result(timeout=10)
    note = "\n".join(getattr(raised.value, "__notes__", []))
    assert (
        f"runner pid {info['runner_pid']}" in note and f"kinetic jobs cleanup {job.job_id}" in note
    )

    capsys.readouterr()
    assert main(["jobs", "status", job.job_id]) == 1
    out = capsys.readouterr().out
    assert f"runner pid {info['runner_pid']}" in out and info["workdir"] in out

    if via == "cli":
        assert main(["jobs", "cleanup", job.job_id]) == 0
    else:
        job.cleanup()
    assert _until_gone(group) == []  # nothing of the job stays alive
    assert kc.attach(job.job_id).state().status is kc.JobStatus.FAILED  # terminal stays
    capsys.readouterr()
    assert main(["jobs", "status", job.job_id]) == 1
    assert "runner pid" not in capsys.readouterr().out  # no longer held: nothing to get into


def test_a_successful_debug_job_holds_nothing(storage_uri: str) -> None:
    job = kc.submit(outdebug_fns.succeed, debug=True)
    assert job.result(timeout=60, cleanup=False) == 42
    assert debugging.read(open_storage(storage_uri), job.job_id) is None


def test_debug_must_be_a_bool(storage_uri: str) -> None:
    with pytest.raises(ConfigError, match="debug must be True or False"):
        kc.submit(outdebug_fns.succeed, debug="yes")  # type: ignore[arg-type]
    assert open_storage(storage_uri).list_names("") in ([], ["tmp"])


def test_the_debug_record_and_message_carry_no_secret(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KINETIC_SIGNING_KEY", "signing-s3cret")
    monkeypatch.setenv("API_TOKEN", "token-s3cret")
    job = kc.submit(
        outdebug_fns.fail_after_writing, ("x",), debug=True, target={"env": ["API_TOKEN"]}
    )
    assert job.wait(timeout=60).status is kc.JobStatus.FAILED
    storage = open_storage(storage_uri)
    raw = storage.read_bytes(f"jobs/{job.job_id}/{debugging.DEBUG}").decode()
    info = debugging.read(storage, job.job_id)
    assert info is not None
    for secret in ("signing-s3cret", "token-s3cret"):
        assert secret not in raw and secret not in debugging.describe(info)
    job.cleanup()
    assert _until_gone([info["runner_pid"], info["supervisor_pid"]]) == []
