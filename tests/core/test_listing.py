"""``list_jobs`` with neuro's filters, ``owner``/``description`` at submit, ``kc.tags()``,
and the same in ``kinetic jobs list``/``status``, on real local jobs.

Three jobs, made once per module: ``a`` (alice, succeeded), ``b`` (bob, failed) and ``c``
(the submitting user, held running on a gate file), with ``mid`` a time between ``b``
and ``c``'s creation.
"""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

import kinetic_core as kc
import kinetic_core.jobs.listing as listing
from kinetic_core.cli import main
from tests.cleanup import kill_leftovers
from tests.core import jobfns

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Jobs:
    uri: str
    a: kc.JobHandle
    b: kc.JobHandle
    c: kc.JobHandle
    mid: float

    @property
    def target(self) -> kc.Target:
        return kc.Target(storage=self.uri)

    def ids(self, **filters: Any) -> list[str]:
        return [h.job_id for h in kc.list_jobs(target=self.target, **filters)]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jobs]:
    root = tmp_path_factory.mktemp("listing")
    uri = f"file://{root / 'store'}"
    target = kc.Target(storage=uri, tags={"env": "dev"})
    a = kc.submit(
        jobfns.add,
        (1,),
        name="a",
        owner="alice",
        tags={"team": "ml"},
        description="first try\nwith a second line",
        target=target,
    )
    b = kc.submit(
        jobfns.fail, ("no",), name="b", owner="bob", tags={"team": "infra"}, target=target
    )
    a.wait(timeout=60), b.wait(timeout=60)
    time.sleep(0.01)  # created_at comes from the clock: keep mid strictly between
    mid = time.time()
    time.sleep(0.01)
    ready = root / "c-ready"
    c = kc.submit(
        jobfns.wait_for_file,
        (str(root / "c-gate"), None, str(ready)),
        name="c",
        description="x" * 100,
        target=kc.Target(storage=uri),
    )
    while not ready.exists() and not c.done():
        time.sleep(0.01)
    yield Jobs(uri, a, b, c, mid)
    (root / "c-gate").touch()
    kill_leftovers(root / "store")


def test_owner_is_the_submitting_user_unless_given(jobs: Jobs) -> None:
    assert (jobs.a.owner, jobs.b.owner, jobs.c.owner) == ("alice", "bob", getpass.getuser())
    stored = json.loads(
        (Path(jobs.uri[len("file://") :]) / "jobs" / jobs.a.job_id / "handle.json").read_text()
    )
    assert stored["owner"] == "alice" and stored["description"].startswith("first try")


def test_statuses_owner_name_and_tags_filter(jobs: Jobs) -> None:
    a, b, c = jobs.a.job_id, jobs.b.job_id, jobs.c.job_id
    assert jobs.ids() == [c, b, a]  # newest first
    assert jobs.ids(reverse=True) == [a, b, c]
    assert jobs.ids(statuses={"SUCCEEDED", kc.JobStatus.FAILED}) == [b, a]
    assert jobs.ids(statuses=["running", "PENDING"]) == [c]
    assert jobs.ids(status="FAILED") == [b]  # the one-status form still works
    assert jobs.ids(statuses="succeeded") == [a]  # a string is one status, not letters
    assert jobs.ids(owner="alice") == [a]
    assert jobs.ids(owner=getpass.getuser()) == [c]
    assert jobs.ids(name="b") == [b]
    assert jobs.ids(tags={"env": "dev"}) == [b, a]
    assert jobs.ids(tags={"env": "dev", "team": "ml"}) == [a]
    assert jobs.ids(owner="alice", statuses={"FAILED"}) == []


def test_since_and_until_take_epochs_datetimes_durations_and_iso(jobs: Jobs) -> None:
    a, b, c = jobs.a.job_id, jobs.b.job_id, jobs.c.job_id
    assert jobs.ids(since=jobs.mid) == [c]
    assert jobs.ids(until=jobs.mid) == [b, a]
    assert jobs.ids(since=datetime.fromtimestamp(jobs.mid)) == [c]
    assert jobs.ids(since="1h") == [c, b, a]
    assert jobs.ids(until="1h") == []
    assert jobs.ids(since=datetime.fromtimestamp(jobs.mid).isoformat()) == [c]
    assert jobs.ids(until="2000-01-01") == []


def test_limit_applies_after_filtering_and_ordering(jobs: Jobs) -> None:
    a, b, c = jobs.a.job_id, jobs.b.job_id, jobs.c.job_id
    assert jobs.ids(limit=1) == [c]
    assert jobs.ids(statuses={"SUCCEEDED", "FAILED"}, limit=1) == [b]
    assert jobs.ids(statuses={"SUCCEEDED", "FAILED"}, limit=1, reverse=True) == [a]
    assert jobs.ids(reverse=True, limit=2) == [a, b]


def test_status_filter_resolves_only_what_the_other_filters_kept_in_one_call(
    jobs: Jobs, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []
    real = listing.resolve_states

    def counting(handles: list[kc.JobHandle]) -> list[kc.JobState]:
        calls.append([h.job_id for h in handles])
        return real(handles)

    jobs.ids()  # a store's first listing scans it and marks its job index complete
    monkeypatch.setattr(listing, "resolve_states", counting)
    assert jobs.ids(owner="bob", statuses={"FAILED", "RUNNING"}) == [jobs.b.job_id]
    assert calls == []  # b's end is in the index (and it was not recovered): nothing resolved
    assert jobs.ids(statuses={"RUNNING", "SUCCEEDED"}) == [jobs.c.job_id, jobs.a.job_id]
    assert calls == [[jobs.c.job_id]]  # only the job the index does not know ended
    calls.clear()
    assert jobs.ids(owner="bob") == [jobs.b.job_id]
    assert calls == []  # no status filter: no state resolved


@pytest.mark.parametrize(
    ("filters", "says"),
    [
        ({"statuses": {"DONE"}}, "'DONE' is not a job status: use one of PENDING, RUNNING"),
        ({"status": "finished"}, "'finished' is not a job status"),
        ({"since": "yesterday"}, "since='yesterday' is not a time: use an epoch time"),
        ({"until": "2h ago"}, "until='2h ago' is not a time: .*30m, 2h, 7d"),
        ({"since": True}, "since=True is not a time"),
        ({"since": float("nan")}, "since=nan is not a time"),
        ({"since": [1]}, r"since=\[1\] is not a time"),
        ({"limit": 0}, "limit must be a whole number >= 1"),
        ({"limit": "3"}, "limit must be a whole number >= 1"),
        ({"owner": 7}, "owner must be a string"),
        ({"tags": ["team=ml"]}, "tags must be a dict of str to str"),
    ],
)
def test_bad_filters_are_config_errors_saying_what_is_accepted(
    jobs: Jobs, filters: dict[str, Any], says: str
) -> None:
    with pytest.raises(kc.ConfigError, match=says):
        kc.list_jobs(target=jobs.target, **filters)


def test_an_old_handle_without_owner_or_description_still_loads_and_lists(
    tmp_path: Path, storage_uri: str
) -> None:
    job = kc.submit(jobfns.add, (2,), name="old")
    job.wait(timeout=60)
    path = tmp_path / "store" / "jobs" / job.job_id / "handle.json"
    data = json.loads(path.read_text())
    del data["owner"], data["description"]
    path.write_text(json.dumps(data))  # what an earlier version wrote
    again = kc.attach(job.job_id)
    assert (again.owner, again.description) == ("", "")
    assert [h.job_id for h in kc.list_jobs()] == [job.job_id]
    assert kc.list_jobs(owner=getpass.getuser()) == []
    assert again.result(timeout=60) == 2


def test_owner_comes_from_kinetic_owner_and_bad_owners_are_refused(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KINETIC_OWNER", "team-ml")
    job = kc.submit(jobfns.add, (1,))
    assert job.owner == "team-ml"
    assert kc.submit(jobfns.add, (1,), owner="carol").owner == "carol"
    decorated = kc.run(jobfns.add, owner="dave", description="from @run")
    handle = decorated.run_async(3)
    assert (handle.owner, handle.description) == ("dave", "from @run")
    assert decorated.options(owner="erin").run_async(4).owner == "erin"
    before = sorted(os.listdir(tmp_path / "store" / "jobs"))
    for bad, says in [
        ("", "owner must be a non-empty string"),
        ("a\nb", "one line"),
        (3, "non-empty string"),
    ]:
        with pytest.raises(kc.ConfigError, match=says):
            kc.submit(jobfns.add, (1,), owner=bad)  # type: ignore[arg-type]
    assert sorted(os.listdir(tmp_path / "store" / "jobs")) == before  # nothing written


def test_owner_without_a_user_name_is_the_uid(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A container's arbitrary uid has no passwd entry and no USER: getuser() raises there.
    # That cannot be set up portably here, so getuser is made to raise as it would.
    def no_user() -> str:
        raise KeyError("getpwuid(): uid not found: 12345")

    monkeypatch.delenv("KINETIC_OWNER", raising=False)
    monkeypatch.setattr(getpass, "getuser", no_user)
    assert kc.submit(jobfns.add, (1,)).owner == f"uid{os.getuid()}"


def test_description_is_bounded_and_nothing_is_written_beyond(
    storage_uri: str, tmp_path: Path
) -> None:
    job = kc.submit(jobfns.add, (1,), description="y" * listing.DESCRIPTION_LIMIT)
    assert len(kc.attach(job.job_id).description) == listing.DESCRIPTION_LIMIT
    before = sorted(os.listdir(tmp_path / "store" / "jobs"))
    with pytest.raises(kc.ConfigError, match="description is 1001 characters; at most 1000"):
        kc.submit(jobfns.add, (1,), description="y" * 1001)
    with pytest.raises(kc.ConfigError, match="description must be a string"):
        kc.submit(jobfns.add, (1,), description=42)  # type: ignore[arg-type]
    assert sorted(os.listdir(tmp_path / "store" / "jobs")) == before


def test_tags_in_use_leave_kinetic_s_own_out(jobs: Jobs, storage_uri: str) -> None:
    assert kc.tags(target=jobs.target) == {"env": ["dev"], "team": ["infra", "ml"]}
    batch = kc.submit_map(jobfns.add, [(1,)], tags={"team": "ml"})
    assert batch.results(timeout=60, cleanup=False) == [1]  # its child exists now
    assert kc.tags() == {"team": ["ml"]}
    assert kc.tags(internal=True)["kinetic/index"] == ["0"]


# ---- the CLI ---------------------------------------------------------------------------------


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, Any]:
    code = main(argv)
    return code, json.loads(capsys.readouterr().out)


def _listed(jobs: Jobs, capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    code, rows = _json(capsys, ["--storage", jobs.uri, "jobs", "list", "--json", *args])
    assert code == 0
    return [r["job_id"] for r in rows]


def test_cli_list_filters(jobs: Jobs, capsys: pytest.CaptureFixture[str]) -> None:
    a, b, c = jobs.a.job_id, jobs.b.job_id, jobs.c.job_id
    assert _listed(jobs, capsys, "--status", "succeeded", "--status", "FAILED") == [b, a]
    assert _listed(jobs, capsys, "--owner", "alice") == [a]
    assert _listed(jobs, capsys, "--reverse") == [a, b, c]
    assert _listed(jobs, capsys, "--since", "2h") == [c, b, a]
    assert _listed(jobs, capsys, "--since", "30m", "--until", str(jobs.mid)) == [b, a]
    assert _listed(jobs, capsys, "--since", str(jobs.mid)) == [c]
    assert _listed(jobs, capsys, "--until", "7d") == []
    assert _listed(jobs, capsys, "--since", "2000-01-01T00:00", "--name", "c") == [c]
    assert _listed(jobs, capsys, "--tag", "team=ml", "--tag", "env=dev") == [a]
    assert _listed(jobs, capsys, "--status", "FAILED", "--status", "SUCCEEDED", "--limit", "1") == [
        b
    ]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--since", "yesterday"],
            "Invalid value for '--since': 'yesterday' is not a time: use a duration back from now",
        ),
        (["--until", "5 parsecs"], "30m, 2h, 7d"),
        (["--status", "DONE"], "Invalid value for '--status': 'DONE' is not one of"),
    ],
)
def test_cli_list_bad_filters_are_usage_errors(
    jobs: Jobs, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    assert main(["--storage", jobs.uri, "jobs", "list", *args]) == 2
    assert says in " ".join(capsys.readouterr().err.split())


def test_cli_shows_owner_and_description(
    jobs: Jobs, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "300")  # a wide terminal: no column is folded
    assert main(["--storage", jobs.uri, "jobs", "list"]) == 0
    table = capsys.readouterr().out
    assert "owner" in table and "alice" in table and "description" in table
    assert "first try …" in table and "with a second line" not in table  # first line only
    assert "x" * 39 + "…" in table and "x" * 41 not in table  # shortened
    assert main(["--storage", jobs.uri, "jobs", "status", jobs.a.job_id]) == 0
    out = capsys.readouterr().out
    assert "first try" in out and "with a second line" in out  # status prints it whole
    code, status = _json(capsys, ["--storage", jobs.uri, "jobs", "status", jobs.c.job_id, "--json"])
    assert code == 0 and status["description"] == "x" * 100 and status["owner"] == getpass.getuser()


def test_tag_completion_offers_the_tags_in_use(jobs: Jobs) -> None:
    line = f"kinetic --storage {jobs.uri} jobs list --tag te"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "_KINETIC_COMPLETE": "bash_complete",
        "COMP_WORDS": line,
        "COMP_CWORD": str(len(line.split(" ")) - 1),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "kinetic_core.cli"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert [item.split(",", 1)[1] for item in proc.stdout.splitlines()] == [
        "team=infra",
        "team=ml",
    ]


def test_batch_children_belong_to_the_submitting_owner(
    storage_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KINETIC_OWNER", "team-x")
    batch = kc.submit_map(jobfns.add, [(1,), (2,)])
    assert batch.results(timeout=60, cleanup=False) == [1, 2]
    children = [j for j in batch.jobs if j is not None]
    assert [kc.attach(j.job_id).owner for j in children] == ["team-x", "team-x"]
    assert {j.job_id for j in children} <= set(h.job_id for h in kc.list_jobs(owner="team-x"))
