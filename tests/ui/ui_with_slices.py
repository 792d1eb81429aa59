"""``kinetic`` with one more backend, ``tpu-slice``, for a browser test's dashboard over a
store whose job ran on a multi-host TPU slice that the test ran by hand (its workers'
runners started as in tests/core/slice_runs.py).

A backend registered in the test's process alone is unknown to a ``kinetic ui``
subprocess, so that one starts here: ``python -m tests.ui.ui_with_slices --storage URI ui
...`` registers the kind, then runs the CLI. Test-only.

The kind owns ``accelerator`` (so ``JobHandle.accelerator`` is the slice and usage counts
its chips) and answers ``shape`` as the Kubernetes kind does (a ``tpu-v5e-16`` is 4 hosts x
4 chips); its backend runs nothing and reads each worker's log from storage."""

from __future__ import annotations

import sys

import pytest

from kinetic_core.backends import PlainKind
from kinetic_core.backends.kubernetes import KIND as KUBERNETES_KIND
from kinetic_core.cli import main
from kinetic_core.util import registry
from tests.core import scripted_backend, slice_runs

NAME = "tpu-slice"
ENTRY = "tests.ui.ui_with_slices:KIND"


class SliceKind(PlainKind):
    """A TPU slice's kind as far as the core asks: its accelerator and its shape."""

    options = frozenset({"accelerator"})
    multi_host = True
    shape = staticmethod(KUBERNETES_KIND.shape)


KIND = SliceKind(slice_runs.StoredLogs)


def register(monkeypatch: pytest.MonkeyPatch) -> None:
    """``backend="tpu-slice"`` in this test's process (its jobs' phases as scripted)."""
    scripted_backend.ScriptedBackend.reset()
    monkeypatch.setitem(registry.BACKENDS, NAME, ENTRY)


if __name__ == "__main__":
    registry.BACKENDS[NAME] = ENTRY
    sys.exit(main())
