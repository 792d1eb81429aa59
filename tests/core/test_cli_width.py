"""The CLI's tables fit an 80-column terminal: every line at most 80 cells, and what a
person copies (ids, statuses, words of a message) is never broken across lines. Real jobs
and a real batch on the local backend; rich reads the width from ``COLUMNS``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from rich.cells import cell_len

import kinetic_core as kc
from kinetic_core.cli import main
from tests.cleanup import kill_leftovers
from tests.core import batch_helpers as h
from tests.core import jobfns

# The longest name a job id keeps (ids.slug cuts at 20): the widest id there is, 45 cells.
LONG_NAME = "nightly-training-run-with-a-long-name"
MESSAGE = "learning rate too high for the warmup schedule of this particular model"
DESCRIPTION = "Fine-tune the large model on the nightly shard of the click logs"


@dataclass
class Store:
    uri: str
    jobs: list[kc.JobHandle]
    batch: kc.BatchHandle


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    root: Path = tmp_path_factory.mktemp("width") / "store"
    target = kc.Target(storage=f"file://{root}")
    common = {"target": target, "owner": "alice", "description": DESCRIPTION}
    try:
        ok = kc.submit(jobfns.add, (1, 2), name=LONG_NAME, **common)  # type: ignore[arg-type]
        bad = kc.submit(jobfns.fail, (MESSAGE,), name=LONG_NAME, **common)  # type: ignore[arg-type]
        keyed = kc.submit(jobfns.add, (3,), idempotency_key="width-test", target=target)
        running = kc.submit(jobfns.sleep, (120,), name=LONG_NAME, **common)  # type: ignore[arg-type]
        late = kc.Target(storage=f"file://{root}", life_span=1)
        deadline = kc.submit(jobfns.sleep, (60,), name=LONG_NAME, target=late)
        for job in (ok, bad, keyed, deadline):
            job.wait(timeout=60)
        batch = kc.submit_map(h.square_or_fail, [1, 7, 3], target=target, name=LONG_NAME)
        batch.wait(timeout=120)
        yield Store(f"file://{root}", [ok, bad, keyed, running, deadline], batch)
    finally:
        kill_leftovers(root)


def _shown(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    main(argv)
    return capsys.readouterr().out


def _fits(out: str, width: int, whole: list[str]) -> None:
    """Every line at most ``width`` cells; each of ``whole`` on one line somewhere."""
    lines = out.splitlines()
    assert lines and all(cell_len(line) <= width for line in lines), out
    for text in whole:
        assert any(text in line for line in lines), f"{text!r} broken or missing:\n{out}"


def _words_whole(out: str, text: str) -> None:
    """Each word of ``text`` that is shown at all is shown whole (no letter-by-letter fold:
    a fragment of a word at a line's end would be a word that is not in ``text``)."""
    words = set(text.split())
    shown = [t for line in out.splitlines() for t in re.split(r"[\s│┃]+", line)]
    fragments = [t for t in shown if t and any(w.startswith(t) and w != t for w in words)]
    fragments = [t for t in fragments if t not in words]
    assert not fragments, f"words of {text!r} broken: {fragments}\n{out}"


def test_jobs_list_fits_80_columns(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out = _shown(capsys, ["--storage", store.uri, "jobs", "list"])
    ids = [job.job_id for job in store.jobs] + [store.batch.group_id]
    assert max(len(i) for i in ids) == 45  # the widest id there is
    _fits(out, 80, [job.job_id for job in store.jobs])
    for status in ("SUCCEEDED", "FAILED", "RUNNING"):
        assert status in out
    assert "ago" in out  # relative times
    assert "2026-" not in out  # no absolute time stamps in the narrow table


def test_wide_terminal_shows_more_columns(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    narrow = _shown(capsys, ["--storage", store.uri, "jobs", "list"])
    monkeypatch.setenv("COLUMNS", "250")
    wide = _shown(capsys, ["--storage", store.uri, "jobs", "list"])
    _fits(wide, 250, [job.job_id for job in store.jobs] + ["alice", MESSAGE[:40]])
    for header in ("owner", "description", "message", "attempt"):
        assert header in wide and header not in narrow


def test_jobs_status_fits_80_columns(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    for job in store.jobs:
        out = _shown(capsys, ["--storage", store.uri, "jobs", "status", job.job_id])
        _fits(out, 80, [job.job_id])
    bad = _shown(capsys, ["--storage", store.uri, "jobs", "status", store.jobs[1].job_id])
    _words_whole(bad, MESSAGE)
    assert "alice" in bad and "learning rate" in bad
    _words_whole(bad, DESCRIPTION)
    history = _shown(capsys, ["--storage", store.uri, "jobs", "history", store.jobs[1].job_id])
    _fits(history, 80, ["FAILED", "RUNNING"])


def test_batch_list_and_status_fit_80_columns(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    group = store.batch.group_id
    out = _shown(capsys, ["--storage", store.uri, "batch", "list"])
    _fits(out, 80, [group, "FAILED=1,", "SUCCEEDED=2"])
    out = _shown(capsys, ["--storage", store.uri, "batch", "status", group])
    failed = store.batch.failed_children()
    assert len(failed) == 1 and failed[0].job is not None
    _fits(out, 80, [group, failed[0].job.job_id])


def test_a_failed_jobs_reason_shows_at_80_columns(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35 item 9: at 80 columns ``jobs list`` dropped the reason column, so a FAILED
    job did not say why."""
    assert store.jobs[4].state().reason == "DeadlineExceeded"
    monkeypatch.setenv("COLUMNS", "80")
    out = _shown(capsys, ["--storage", store.uri, "jobs", "list"])
    _fits(out, 80, [job.job_id for job in store.jobs] + ["DeadlineExceeded"])
    assert "5 jobs" in out.splitlines()[0]


def test_history_messages_stay_on_one_line_cut_with_an_ellipsis(
    store: Store, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 35 item 9: ``jobs history`` cut messages at 120 characters without an
    ellipsis and folded them over several lines."""
    bad = store.jobs[1]
    transitions = bad.history()
    monkeypatch.setenv("COLUMNS", "100")
    out = _shown(capsys, ["--storage", store.uri, "jobs", "history", bad.job_id])
    rows = [line for line in out.splitlines() if line.startswith("│")]
    assert len(rows) == len(transitions), out  # one line per transition
    assert "…" in out and "learning rate" in out, out
    monkeypatch.setenv("COLUMNS", "250")
    wide = _shown(capsys, ["--storage", store.uri, "jobs", "history", bad.job_id])
    assert MESSAGE in wide and "…" not in wide
