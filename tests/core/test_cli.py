"""`kinetic jobs …` end to end against real jobs."""

from __future__ import annotations

import json

import pytest

import kinetic_core as kc
from kinetic_core.cli import main
from tests.core import jobfns


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, object]:
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


def test_jobs_list_status_logs_result(storage_uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    ok = kc.submit(jobfns.chatty, (3,), name="chatty", tags={"team": "ml"})
    ok.wait(timeout=60)
    code, rows = _json(capsys, ["jobs", "list", "--json"])
    assert code == 0 and [r["job_id"] for r in rows] == [ok.job_id]  # type: ignore[index]
    assert rows[0]["state"]["status"] == "SUCCEEDED"  # type: ignore[index]
    code, rows = _json(capsys, ["jobs", "list", "--json", "--tag", "team=other"])
    assert rows == []
    code, status = _json(capsys, ["--storage", storage_uri, "jobs", "status", ok.job_id, "--json"])
    assert code == 0 and status["state"]["status"] == "SUCCEEDED"  # type: ignore[index]
    assert main(["jobs", "logs", ok.job_id, "--tail", "1"]) == 0
    assert capsys.readouterr().out.strip() == "line 2"
    assert main(["jobs", "logs", ok.job_id, "--follow"]) == 0
    assert "line 0" in capsys.readouterr().out
    code, logs = _json(capsys, ["jobs", "logs", ok.job_id, "--json", "--tail", "2"])
    assert logs == {"job_id": ok.job_id, "lines": ["line 1", "line 2"]}
    code, result = _json(capsys, ["jobs", "result", ok.job_id, "--json"])
    assert code == 0 and result == {"job_id": ok.job_id, "result": 3}
    assert main(["jobs", "list"]) == 0
    assert ok.job_id in capsys.readouterr().out  # the rich table


def test_failed_result_exits_non_zero_with_remote_error(
    storage_uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = kc.submit(jobfns.fail, ("learning rate too high",))
    bad.wait(timeout=60)
    assert main(["jobs", "result", bad.job_id]) == 1
    err = capsys.readouterr().err
    assert "ValueError: learning rate too high" in err and "Remote traceback" in err
    assert main(["jobs", "status", bad.job_id]) == 1


def test_cancel_and_cleanup(storage_uri: str, capsys: pytest.CaptureFixture[str]) -> None:
    job = kc.submit(jobfns.sleep, (60,))
    assert main(["jobs", "cancel", job.job_id]) == 0
    assert "cancel requested" in capsys.readouterr().out
    assert job.wait(timeout=30).status is kc.JobStatus.CANCELLED
    assert main(["jobs", "cleanup", job.job_id]) == 0
    assert main(["jobs", "status", "no-such-job"]) == 2
    assert "No job 'no-such-job'" in capsys.readouterr().err
