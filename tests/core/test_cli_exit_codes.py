"""``kinetic``: exit codes per command (0 done, 1 failed/cancelled, 2 usage or configuration,
124 timeout), errors that do not mislead, ``--version``, completion and closed pipes.

Real jobs on the local backend; the CLI runs in-process through ``main`` (its output
captured) or, where a real terminal pipe or environment matters, as its own process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.cli import main
from tests.cleanup import kill_leftovers
from tests.core import jobfns

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Jobs:
    uri: str
    ok: kc.JobHandle  # chatty(3): SUCCEEDED, prints "line 0".."line 2"
    bad: kc.JobHandle  # fail(...): FAILED with a remote ValueError
    cancelled: kc.JobHandle
    running: kc.JobHandle  # sleeps for minutes


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobs]:
    root = tmp_path_factory.mktemp("cli-codes") / "store"
    target = kc.Target(storage=f"file://{root}")
    try:
        ok = kc.submit(jobfns.chatty, (3,), target=target, name="chatty")
        bad = kc.submit(jobfns.fail, ("learning rate too high",), target=target)
        cancelled = kc.submit(jobfns.sleep, (120,), target=target)
        running = kc.submit(jobfns.sleep, (300,), target=target)
        assert cancelled.cancel()
        for job in (ok, bad, cancelled):
            job.wait(timeout=60)
        yield Jobs(f"file://{root}", ok, bad, cancelled, running)
    finally:
        kill_leftovers(root)


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    monkeypatch.delenv("KINETIC_SIGNING_KEY", raising=False)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def kinetic(*argv: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``kinetic ARGV`` as its own process (stdout and stderr piped)."""
    return subprocess.Popen(
        [sys.executable, "-m", "kinetic_core.cli", *argv],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# ---- jobs status / logs / result ------------------------------------------------------------


@pytest.mark.parametrize(
    ("which", "code"), [("ok", 0), ("bad", 1), ("cancelled", 1), ("running", 0)]
)
def test_status_exit_code(
    jobs: Jobs, capsys: pytest.CaptureFixture[str], which: str, code: int
) -> None:
    job: kc.JobHandle = getattr(jobs, which)
    rc, out, _ = cli(capsys, "--storage", jobs.uri, "jobs", "status", job.job_id, "--json")
    assert rc == code
    assert json.loads(out)["job_id"] == job.job_id


@pytest.mark.parametrize(
    ("which", "code", "line"),
    [
        ("ok", 0, "SUCCEEDED"),
        ("bad", 1, "FAILED (Error: "),
        ("cancelled", 1, "CANCELLED (Cancelled"),
    ],
)
def test_logs_follow_exit_code_and_final_status_line(
    jobs: Jobs, capsys: pytest.CaptureFixture[str], which: str, code: int, line: str
) -> None:
    job: kc.JobHandle = getattr(jobs, which)
    rc, out, err = cli(capsys, "--storage", jobs.uri, "jobs", "logs", job.job_id, "--follow")
    assert rc == code
    assert err.strip().splitlines()[-1].startswith(f"kinetic job {job.job_id}: {line}")
    assert "kinetic job" not in out  # the status line goes to stderr, the log to stdout
    if which == "ok":
        assert out.splitlines() == ["line 0", "line 1", "line 2"]
    # Without --follow the command only prints what is there: exit 0 whatever the job did.
    assert cli(capsys, "--storage", jobs.uri, "jobs", "logs", job.job_id)[0] == 0


def test_result_of_a_failed_job_prints_the_remote_traceback_once(
    jobs: Jobs, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = cli(capsys, "--storage", jobs.uri, "jobs", "result", jobs.bad.job_id, "--keep")
    assert rc == 1 and out == ""
    head, error = err.splitlines()[:2]
    assert head.startswith(f"Kinetic job {jobs.bad.job_id} (attempt 1) FAILED (reason: Error")
    assert error == "ValueError: learning rate too high"
    assert err.count("Remote traceback") == 1
    assert err.count("raise ValueError(message)") == 1  # the remote source line, once


def test_result_json_of_a_failed_job_is_an_error_object(
    jobs: Jobs, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, _ = cli(
        capsys, "--storage", jobs.uri, "jobs", "result", jobs.bad.job_id, "--keep", "--json"
    )
    assert rc == 1
    doc = json.loads(out)
    assert doc["job_id"] == jobs.bad.job_id
    assert doc["error"]["type"] == "ValueError"
    assert doc["error"]["message"] == "learning rate too high"
    assert "raise ValueError(message)" in doc["error"]["traceback"]

    rc, out, _ = cli(
        capsys, "--storage", jobs.uri, "jobs", "result", jobs.cancelled.job_id, "--json"
    )
    assert rc == 1 and json.loads(out)["error"]["type"] == "JobCancelled"


def test_result_timeout_is_124_and_the_job_runs_on(
    jobs: Jobs, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = cli(
        capsys, "--storage", jobs.uri, "jobs", "result", jobs.running.job_id, "--timeout", "0.2"
    )
    assert rc == 124 and out == "" and err.startswith("error: ")
    assert jobs.running.state().status is kc.JobStatus.RUNNING


def test_result_ok_then_collected_is_a_kinetic_error(
    jobs: Jobs, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, _ = cli(capsys, "--storage", jobs.uri, "jobs", "result", jobs.ok.job_id, "--keep")
    assert rc == 0 and out.strip() == "3"


def test_cancel_and_cleanup_exit_0(jobs: Jobs, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = cli(capsys, "--storage", jobs.uri, "jobs", "cancel", jobs.cancelled.job_id)
    assert rc == 0 and out.strip() == f"{jobs.cancelled.job_id}: already finished"
    rc, out, _ = cli(capsys, "--storage", jobs.uri, "jobs", "cleanup", jobs.cancelled.job_id)
    assert rc == 0 and out.strip() == f"{jobs.cancelled.job_id}: cleaned up"


@pytest.mark.parametrize("command", ["status", "logs", "result", "cancel", "cleanup"])
def test_unknown_job_is_exit_2_with_what_to_do(
    jobs: Jobs, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    rc, out, err = cli(capsys, "--storage", jobs.uri, "jobs", command, "no-such-job")
    assert rc == 2 and out == ""
    assert err.startswith("error: No job 'no-such-job'") and "KINETIC_STORAGE" in err


# ---- usage and configuration errors: exit 2, no traceback ----------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["jobs", "list", "--tag", "team"], "'team' is not KEY=VALUE"),
        (["jobs", "list", "--tag", "=ml"], "'=ml' is not KEY=VALUE"),
        (["jobs", "list", "--status", "DONE"], "'DONE' is not one of"),
        (["jobs", "list", "--limit", "0"], "--limit"),
        (["jobs", "logs", "x00", "--tail", "-1"], "--tail"),
        (["jobs", "status"], "Missing argument 'JOB_ID'"),
        (["jobs", "frobnicate"], "No such command 'frobnicate'"),
        (["--storage", "file://relative/dir", "jobs", "list"], "use an absolute path"),
        (["--storage", "s3://bucket", "jobs", "list"], "Malformed storage URI"),
    ],
)
def test_usage_and_configuration_errors_exit_2(
    jobs: Jobs, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    if argv[0] != "--storage":
        argv = ["--storage", jobs.uri, *argv]
    rc, out, err = cli(capsys, *argv)
    assert rc == 2 and out == ""
    assert message in err and "Traceback" not in err


def test_tag_filter_with_key_value(jobs: Jobs, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = cli(capsys, "--storage", jobs.uri, "jobs", "list", "--json", "--name", "chatty")
    assert rc == 0 and [j["job_id"] for j in json.loads(out)] == [jobs.ok.job_id]
    rc, out, err = cli(capsys, "--storage", jobs.uri, "jobs", "list", "--tag", "team=ml")
    assert rc == 0 and "0 jobs" in out and "No kinetic jobs" not in err  # filtered, not empty


@pytest.mark.parametrize("group", ["jobs", "batch"])
def test_listing_a_root_that_does_not_exist_or_is_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], group: str
) -> None:
    missing = f"file://{tmp_path}/nowhere"
    rc, out, err = cli(capsys, "--storage", missing, group, "list")
    assert rc == 2 and out == ""
    assert f"No kinetic data at {missing}: it does not exist" in err
    assert not (tmp_path / "nowhere").exists()  # listing creates nothing

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    rc, out, err = cli(capsys, "--storage", f"file://{blocker}", group, "list", "--json")
    assert rc == 2 and out == ""
    assert f"Storage root file://{blocker} is a file, not a directory" in err


@pytest.mark.parametrize(("group", "what"), [("jobs", "jobs"), ("batch", "batches")])
def test_an_empty_root_lists_nothing_with_a_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], group: str, what: str
) -> None:
    rc, out, err = cli(capsys, "--storage", f"file://{tmp_path}", group, "list", "--json")
    assert rc == 0 and json.loads(out) == []
    assert f"No kinetic {what} at file://{tmp_path}. Is --storage / KINETIC_STORAGE right?" in err


def test_gs_storage_without_the_gcs_extra(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gcs extra is installed here: make its packages unimportable for this test."""
    for name in [n for n in sys.modules if n == "google" or n.startswith("google.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "google", None)
    monkeypatch.delitem(sys.modules, "kinetic_core.storage.gcs", raising=False)
    rc, out, err = cli(capsys, "--storage", "gs://no-extra-bucket/k", "jobs", "list")
    assert rc == 2 and out == ""
    assert "needs the 'gcs' extra" in err and "pip install 'kinetic-workflows[gcs]'" in err


# ---- version, completion, pipes -------------------------------------------------------------


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = cli(capsys, "--version")
    assert rc == 0 and out.strip() == f"kinetic, version {kc.__version__}"


def test_shell_completion_of_commands_and_job_ids(jobs: Jobs) -> None:
    proc = kinetic(env={"_KINETIC_COMPLETE": "bash_source"})
    script, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "_kinetic_completion" in script

    def complete(line: str) -> list[str]:
        words = line.split(" ")
        env = {
            "_KINETIC_COMPLETE": "bash_complete",
            "COMP_WORDS": line,
            "COMP_CWORD": str(len(words) - 1),
        }
        proc = kinetic(env=env)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        return [item.split(",", 1)[1] for item in out.splitlines()]

    assert complete("kinetic jo") == ["jobs"]
    assert set(complete("kinetic jobs ")) >= {"list", "status", "logs", "result"}
    prefix = jobs.ok.job_id[:6]
    assert jobs.ok.job_id in complete(f"kinetic --storage {jobs.uri} jobs status {prefix}")


def test_follow_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    target = kc.Target(storage=f"file://{tmp_path}/store")
    try:
        job = kc.submit(jobfns.chatty, (100_000,), target=target)  # far more than a pipe holds
        proc = kinetic("--storage", target.storage or "", "jobs", "logs", job.job_id, "--follow")
        assert proc.stdout is not None
        assert proc.stdout.readline() == "line 0\n"
        proc.stdout.close()  # what `| head -1` does once it has its line
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert "Traceback" not in err and "BrokenPipeError" not in err
        assert "Exception ignored" not in err
    finally:
        kill_leftovers(tmp_path / "store")
