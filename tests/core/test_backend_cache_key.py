"""``get_backend`` caches each backend under the key its kind declares (``cache_key``),
asked at every call: what the environment holds now counts (a rotated signing key)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.backends import PlainKind, get_backend
from kinetic_core.util import registry


class KeyedBackend:
    def __init__(self, target: kc.Target) -> None:
        self.target = target


class KeyedKind(PlainKind):
    """Keys on its storage and what ``KEYED_TOKEN`` holds now."""

    def cache_key(self, target: kc.Target) -> tuple[object, ...]:
        return (target.storage, os.environ.get("KEYED_TOKEN"))


KIND = KeyedKind(KeyedBackend)


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.BACKENDS, "keyed", f"{__name__}:KIND")
    monkeypatch.delenv("KEYED_TOKEN", raising=False)


def test_a_declared_cache_key_decides_what_shares_an_instance(
    registered: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here, there = f"file://{tmp_path}/a", f"file://{tmp_path}/b"
    first = get_backend(kc.Target(backend="keyed", storage=here, namespace="one"))
    assert isinstance(first, KeyedBackend)
    # Not in its key: another namespace.
    assert get_backend(kc.Target(backend="keyed", storage=here, namespace="two")) is first
    assert get_backend(kc.Target(backend="keyed", storage=there)) is not first
    # Asked at every call: what the environment holds now counts.
    monkeypatch.setenv("KEYED_TOKEN", "rotated")
    rotated = get_backend(kc.Target(backend="keyed", storage=here))
    assert rotated is not first
    assert get_backend(kc.Target(backend="keyed", storage=here)) is rotated
