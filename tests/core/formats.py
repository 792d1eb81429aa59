"""Envelope formats in tests: format 3 (BLAKE3, the ``fast`` extra, installed by ``dev``)
and format 2 (sha256), which a process without ``blake3`` writes.

``without_blake3`` makes ``import blake3`` fail in this process the way a missing package
does (``sys.modules[name] = None`` is the import system's own "not importable" mark), so the
real fallback and refusal paths run.
"""

from __future__ import annotations

import sys

import pytest

from kinetic_core.records import chunks


def without_blake3(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on in this test, ``blake3`` cannot be imported: format 2 is written."""
    monkeypatch.setitem(sys.modules, "blake3", None)


def with_format(monkeypatch: pytest.MonkeyPatch, fmt: int) -> str:
    """Write envelopes of format ``fmt`` (2 or 3) in this test; its digest algorithm."""
    if fmt == 2:
        without_blake3(monkeypatch)
        return chunks.SHA256
    assert chunks.blake3_available(), "format 3 needs blake3 (the dev extra installs it)"
    return chunks.BLAKE3
