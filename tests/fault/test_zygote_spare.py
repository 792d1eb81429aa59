"""The zygote's spare (the child forked ahead of the next request, issue 37): a SIGKILL of
it at any instant costs no job (the zygote forks for the request itself and then a new
spare), and no spare outlives its zygote. Randomized instants: ``chaos.py``'s "spare"."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.control.polling import poll_ticks
from kinetic_core.util.procs import process_alive, wait_exit
from tests.core import jobfns
from tests.fault.chaos import spare_of


@pytest.fixture
def zygote_socket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A zygote of this test alone (safe to kill)."""
    (tmp_path / "zygote").mkdir(mode=0o700)
    path = tmp_path / "zygote" / "zygote.sock"
    monkeypatch.setenv("KINETIC_ZYGOTE_SOCKET", str(path))
    return path


def _zygote(path: Path) -> int:
    return int(Path(f"{path}.pid").read_text())


def _spare(zygote: int) -> int:
    for _ in poll_ticks(interval=0.02, timeout=30, describe=lambda: f"zygote {zygote}'s spare"):
        spare = spare_of(zygote)
        if spare:
            return spare
    raise AssertionError("unreachable")


def test_a_killed_spare_costs_no_job_and_is_forked_again(
    storage_uri: str, zygote_socket: Path
) -> None:
    assert kc.submit(jobfns.add, (1, 2)).result(timeout=60) == 3
    zygote = _zygote(zygote_socket)
    spare = _spare(zygote)
    os.kill(spare, signal.SIGKILL)
    wait_exit(spare, 10)
    assert kc.submit(jobfns.add, (2, 3)).result(timeout=60) == 5  # forked for it
    assert process_alive(zygote)
    again = _spare(zygote)
    assert again != spare
    assert kc.submit(jobfns.add, (3, 4)).result(timeout=60) == 7  # served by the new spare
    assert _zygote(zygote_socket) == zygote


def test_no_spare_outlives_its_zygote(storage_uri: str, zygote_socket: Path) -> None:
    assert kc.submit(jobfns.add, (1, 2)).result(timeout=60) == 3
    zygote = _zygote(zygote_socket)
    spare = _spare(zygote)
    os.kill(zygote, signal.SIGKILL)
    wait_exit(spare, 10)
    assert not process_alive(spare)
    assert kc.submit(jobfns.add, (2, 3)).result(timeout=60) == 5  # a new zygote serves
