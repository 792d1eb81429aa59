"""Usage per attempt, recorded once (issue 22, item 1): real local jobs, their records, the
price table, the CLI's sums per tag. Chips on a real slice: tests/kubernetes/test_usage_slice.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.cli import main
from kinetic_core.control.polling import poll_ticks
from kinetic_core.records import layout
from tests.core import jobfns

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_PRICES = {"currency": "USD", "tpu-v5e": {"on_demand": 1.25, "spot": 0.5}}


def _store(storage_uri: str) -> Path:
    return Path(storage_uri[len("file://") :])


def _record(storage_uri: str, job_id: str) -> dict[str, object]:
    path = _store(storage_uri) / layout.job_file(job_id, layout.USAGE)
    return json.loads(path.read_text())


def test_a_succeeded_local_job_uses_no_chips_and_its_usage_outlives_its_history(
    storage_uri: str,
) -> None:
    job = kc.submit(jobfns.sleep, (0.3, "done"))
    assert job.result(timeout=60, cleanup=False) == "done"
    usage = job.usage()
    (attempt,) = usage.attempts
    assert (attempt.job_id, attempt.attempt, attempt.status, attempt.reason) == (
        job.job_id,
        1,
        "SUCCEEDED",
        None,
    )
    # local: no accelerator, 0 chips, so 0 chip-hours however long it ran
    assert (attempt.accelerator, attempt.chips, attempt.hosts, attempt.spot) == (None, 0, 1, False)
    assert attempt.running_seconds >= 0.3 and attempt.queued_seconds >= 0
    assert (attempt.chip_hours, attempt.lost, attempt.cost) == (0.0, False, None)
    assert (usage.chip_hours, usage.lost_chip_hours, usage.cost, usage.currency) == (
        0.0,
        0.0,
        None,
        None,
    )
    assert usage.running_seconds == attempt.running_seconds
    record = _record(storage_uri, job.job_id)
    assert record["job_id"] == job.job_id and record["running_seconds"] == attempt.running_seconds
    # a cleanup of the history (and of the runner's records) loses nothing: read back
    job_dir = _store(storage_uri) / layout.job_dir(job.job_id)
    shutil.rmtree(job_dir / "history")
    for name in ("started.json", "finished.json"):
        (job_dir / name).unlink()
    assert job.usage() == usage
    assert kc.attach(job.job_id).usage().to_dict() == usage.to_dict()


def test_a_job_recovered_after_a_failure_counts_the_redone_attempt_as_lost(
    storage_uri: str, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    target = kc.Target(max_recoveries=1, recover_on_exit_codes=[75], prices=EXAMPLE_PRICES)
    job = kc.submit(jobfns.resumable, (str(work), 4), {"exit_code": 75}, target=target)
    assert job.result(timeout=120, cleanup=False)["resumed_from"] == 2
    usage = job.usage()
    first, second = usage.attempts
    successor = job.state().job_id
    assert [(a.job_id, a.attempt) for a in usage.attempts] == [(job.job_id, 1), (successor, 2)]
    assert (first.status, first.lost) == ("FAILED", True)  # redone by attempt 2
    assert (second.status, second.lost) == ("SUCCEEDED", False)
    assert usage.running_seconds == first.running_seconds + second.running_seconds
    assert usage.queued_seconds == first.queued_seconds + second.queued_seconds
    # a price table priced the attempts: 0 chips cost nothing, in the table's currency
    assert (first.cost, second.cost, usage.cost, usage.currency) == (0.0, 0.0, 0.0, "USD")
    # every attempt's handle reports the whole job
    assert kc.attach(successor).usage() == usage
    assert job.usage(prices={"gpu-l4": {"on_demand": 1.0}}).currency is None


def test_a_running_job_is_measured_live_and_recorded_once_it_ended(
    storage_uri: str, tmp_path: Path
) -> None:
    gate, ready = tmp_path / "gate", tmp_path / "ready"
    job = kc.submit(jobfns.wait_for_file, (str(gate), 7), {"ready": str(ready)})
    for _ in poll_ticks(interval=0.05, timeout=60, describe=lambda: "the function to run"):
        if ready.exists():
            break
    (attempt,) = job.usage().attempts
    assert (attempt.status, attempt.ended_at) == ("RUNNING", None)
    assert attempt.started_at is not None
    record = _store(storage_uri) / layout.job_file(job.job_id, layout.USAGE)
    assert not record.exists()  # nothing final to record yet
    gate.touch()
    assert job.result(timeout=60, cleanup=False) == 7
    (ended,) = job.usage().attempts
    assert ended.status == "SUCCEEDED" and ended.ended_at is not None
    assert _record(storage_uri, job.job_id)["status"] == "SUCCEEDED"


def _readers(storage_uri: str, job_id: str, n: int) -> list[subprocess.Popen[str]]:
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(ROOT)!r})
        import kinetic_core as kc
        sys.stdin.readline()  # all start reading at once
        print(json.dumps(kc.attach({job_id!r}).usage().to_dict()))
        """
    )
    env = {**os.environ, "KINETIC_STORAGE": storage_uri}
    return [
        subprocess.Popen(
            [sys.executable, "-c", script],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for _ in range(n)
    ]


def test_concurrent_readers_record_the_usage_once_and_all_report_it(storage_uri: str) -> None:
    job = kc.submit(jobfns.add, (1, 2))
    assert job.wait(timeout=60).status is kc.JobStatus.SUCCEEDED
    path = _store(storage_uri) / layout.job_file(job.job_id, layout.USAGE)
    assert not path.exists()  # nobody asked yet
    procs = _readers(storage_uri, job.job_id, 6)
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    reports = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    record = json.loads(path.read_text())
    (attempt,) = {json.dumps(r["attempts"][0], sort_keys=True) for r in reports}
    reported = json.loads(attempt)
    assert reported["job_id"] == job.job_id
    # one record, and every reader reports exactly its figures
    for name in ("queued_seconds", "running_seconds", "started_at", "ended_at", "status"):
        assert reported[name] == record[name], name
    assert [n for n in os.listdir(path.parent) if n.startswith("usage")] == ["usage.json"]


def test_a_forged_usage_record_is_ignored(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A usage.json copied from another job (or, with a signing key, one not signed with
    it) is never reported: the attempt is measured from its own records."""
    a = kc.submit(jobfns.add, (1, 2))
    b = kc.submit(jobfns.add, (3, 4))
    a.wait(timeout=60), b.wait(timeout=60)
    honest = a.usage().attempts[0]
    forged = {**_record(storage_uri, a.job_id), "chips": 256, "chip_hours": 1000.0}
    path_b = _store(storage_uri) / layout.job_file(b.job_id, layout.USAGE)
    path_b.write_text(json.dumps(forged))  # names job a, planted in job b's folder
    (measured,) = b.usage().attempts
    assert (measured.job_id, measured.chips, measured.chip_hours) == (b.job_id, 0, 0.0)

    # with a signing key: a record of the right job without a valid signature is ignored
    monkeypatch.setenv("KINETIC_SIGNING_KEY", "usage-key")
    signed = kc.submit(jobfns.add, (5, 6))
    signed.wait(timeout=60)
    path = _store(storage_uri) / layout.job_file(signed.job_id, layout.USAGE)
    path.write_text(json.dumps({**honest.to_dict(), "job_id": signed.job_id, "version": 1}))
    (checked,) = signed.usage().attempts
    assert checked.job_id == signed.job_id
    assert checked.started_at != honest.started_at  # measured, not the planted figures
    assert json.loads(path.read_text())["started_at"] == honest.started_at  # left as it was


@pytest.mark.parametrize(
    ("prices", "says"),
    [
        ({}, "accelerator -> prices per chip-hour"),
        ({"tpu-v5e": 1.2}, "prices must be"),
        ({"tpu-v5e": {"ondemand": 1.2}}, "on_demand"),
        ({"tpu-v5e": {"spot": -1}}, "tpu-v5e.spot must be a number >= 0"),
        ({"tpu-v5e": {"spot": True}}, "tpu-v5e.spot must be a number >= 0"),
        ({"currency": 3, "gpu-l4": {"spot": 1}}, "currency must be a name"),
        ("/no/such/prices.json", "cannot read the price table file"),
        ('{"tpu-v5e": ', "is not valid JSON"),
    ],
)
def test_a_bad_price_table_is_a_config_error_stating_the_shape(
    storage_uri: str, prices: object, says: str
) -> None:
    with pytest.raises(kc.ConfigError, match="prices") as raised:
        kc.Target(prices=prices).resolve()  # type: ignore[arg-type]
    assert says in str(raised.value)
    assert not (_store(storage_uri) / "jobs").exists()  # refused before anything is written
    with pytest.raises(kc.ConfigError, match="prices"):
        kc.submit(jobfns.add, (1, 2), target=kc.Target(prices=prices))  # type: ignore[arg-type]


def test_price_tables_from_a_file_and_the_environment(
    storage_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    as_json = tmp_path / "prices.json"
    as_json.write_text(json.dumps(EXAMPLE_PRICES))
    as_yaml = tmp_path / "prices.yaml"
    as_yaml.write_text("currency: EUR\ntpu-v5e:\n  on_demand: 1.25\n  spot: 0.5\n")
    assert kc.Target(prices=str(as_json)).resolve().prices == EXAMPLE_PRICES
    assert kc.Target(prices=str(as_yaml)).resolve().prices == {**EXAMPLE_PRICES, "currency": "EUR"}
    bare = kc.submit(jobfns.add, (1, 2))
    bare.wait(timeout=60)
    assert "prices" not in bare.target and bare.usage().cost is None
    monkeypatch.setenv("KINETIC_PRICES", json.dumps(EXAMPLE_PRICES))
    assert kc.Target().resolve().prices == EXAMPLE_PRICES
    job = kc.submit(jobfns.add, (1, 2))  # the submitter's table travels with the job
    job.wait(timeout=60)
    assert job.target["prices"] == EXAMPLE_PRICES
    monkeypatch.setenv("KINETIC_PRICES", str(as_yaml))  # the reader's, for jobs without one
    assert (job.usage().cost, job.usage().currency) == (0.0, "USD")
    assert (bare.usage().cost, bare.usage().currency) == (0.0, "EUR")
    assert bare.usage(prices=str(as_json)).currency == "USD"  # an explicit table wins


def test_cli_usage_sums_per_tag_within_80_columns(
    storage_uri: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = [
        kc.submit(jobfns.add, (1, 2), tags={"dag_id": "nightly", "team": "ml"}),
        kc.submit(jobfns.add, (1, 2), tags={"dag_id": "nightly", "team": "ml"}),
        kc.submit(jobfns.add, (1, 2), tags={"dag_id": "a-very-long-dag-id-of-the-reporting-team"}),
        kc.submit(jobfns.add, (1, 2)),
    ]
    for job in jobs:
        job.wait(timeout=60)
    assert main(["jobs", "usage", "--by", "dag_id", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    groups = {g["value"]: g for g in out["groups"]}
    assert {v: g["jobs"] for v, g in groups.items()} == {
        "nightly": 2,
        "a-very-long-dag-id-of-the-reporting-team": 1,
        None: 1,
    }
    assert out["total"]["attempts"] == 4 and out["by"] == "dag_id"
    nightly = groups["nightly"]["usage"]
    assert nightly["running_seconds"] == sum(j.usage().running_seconds for j in jobs[:2])
    assert main(["jobs", "usage", "--tag", "team=ml", "--json"]) == 0
    (only,) = json.loads(capsys.readouterr().out)["groups"]
    assert (only["value"], only["jobs"]) == ("all", 2)
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["jobs", "usage", "--since", "1h", "--by", "dag_id"]) == 0
    table = capsys.readouterr().out
    assert "nightly" in table and "a-very-long-dag-id-of…" in table
    assert max(map(len, table.splitlines())) <= 80
    assert main(["jobs", "usage", jobs[0].job_id]) == 0
    table = capsys.readouterr().out
    assert jobs[0].job_id in table and "SUCCEEDED" in table and "CPU only" in table
    assert max(map(len, table.splitlines())) <= 80
    code, one = main(["jobs", "usage", jobs[0].job_id, "--json"]), capsys.readouterr().out
    assert code == 0 and json.loads(one)["attempts"][0]["job_id"] == jobs[0].job_id
    assert main(["jobs", "usage", jobs[0].job_id, "--by", "team"]) == 2  # an ID or filters
