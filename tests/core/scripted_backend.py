"""A backend that runs nothing and reports what a test scripts: a job pending or running
for as long as the test wants, which no real backend here can be made to do on demand.

Registered per test through ``kinetic_core.util.registry`` (``register(monkeypatch)``), so status
resolution, deadlines and cancel run their real code against it.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from kinetic_core.backends import BackendState, LaunchSpec, PlainKind
from kinetic_core.util import registry

NAME = "scripted"


class ScriptedBackend:
    """Jobs stay in the phase a test puts them in; ``cancel`` ends them (``gone``) unless
    their id is in ``ignore_cancel`` (a process that takes its time to stop)."""

    name = NAME
    phases: dict[str, BackendState] = {}
    cancelled: list[str] = []
    ignore_cancel: set[str] = set()

    def __init__(self, target: Any) -> None:
        self.target = target

    @classmethod
    def from_target(cls, target: Any) -> ScriptedBackend:
        return cls(target)

    @classmethod
    def reset(cls) -> None:
        cls.phases.clear()
        cls.cancelled.clear()
        cls.ignore_cancel.clear()

    @property
    def scope(self) -> str:
        return NAME

    def launch(self, spec: LaunchSpec) -> None:
        self.phases.setdefault(spec.job_id, BackendState("running", started_at=time.time()))

    def poll(self, job_ids: list[str]) -> dict[str, BackendState]:
        return {j: self.phases.get(j, BackendState("not_found")) for j in job_ids}

    def logs(self, job_id: str, tail: int | None = None, worker: int | None = None) -> str:
        return ""

    def read_logs(
        self, job_id: str, cursor: str | None, worker: int | None = None
    ) -> tuple[str, str | None]:
        return "", cursor

    def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)
        if job_id not in self.ignore_cancel:
            self.phases[job_id] = BackendState("gone", message="deleted by cancel")

    def delete(self, job_id: str) -> None:
        self.phases.pop(job_id, None)

    def sleep_until_change(self, job_ids: list[str], timeout: float) -> None:
        time.sleep(timeout)  # the backend's own wait, as LocalBackend's plain sleep


KIND = PlainKind(ScriptedBackend)


def register(monkeypatch: pytest.MonkeyPatch) -> type[ScriptedBackend]:
    """Make ``backend="scripted"`` resolve to ScriptedBackend for this test."""
    monkeypatch.setitem(registry.BACKENDS, NAME, f"{__name__}:KIND")
    ScriptedBackend.reset()
    return ScriptedBackend
