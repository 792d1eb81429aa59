"""The chaos suite: randomized kills of submitters, the zygote, supervisors and whole
job process groups, and cancels racing jobs; every trial checks the engine's promise
(see ``tests/fault/chaos.py``). Bounded: a fixed number of trials with a fixed seed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cleanup import kill_leftovers
from tests.fault.chaos import KINDS, Chaos

TRIALS = 8 * len(KINDS)


def test_no_kill_breaks_the_promise(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KINETIC_ZYGOTE_SOCKET", str(tmp_path / "zygote" / "zygote.sock"))
    monkeypatch.delenv("KINETIC_SIGNING_KEY", raising=False)
    chaos = Chaos(tmp_path, seed=20261123)
    try:
        tally = chaos.run(TRIALS)
    finally:
        kill_leftovers(tmp_path / "store")
    assert tally.problems == []
    assert tally.trials == TRIALS
    assert tally.recovered == tally.acknowledged  # every key's value came back
    row = tally.row()
    assert [
        row[c] for c in ("duplicates", "orphans", "state_flips", "zygote_deaths", "leftovers")
    ] == [0] * 5
