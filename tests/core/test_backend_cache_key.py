"""``get_backend`` caches each backend under the key its class declares (``cache_key``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core import registry
from kinetic_core.backends import get_backend


class KeyedBackend:
    """Declares its own cache key: its storage and what ``KEYED_TOKEN`` holds now."""

    def __init__(self, target: kc.Target) -> None:
        self.target = target

    @classmethod
    def from_target(cls, target: kc.Target) -> KeyedBackend:
        return cls(target)

    @staticmethod
    def cache_key(target: kc.Target) -> tuple[object, ...]:
        return (target.storage, os.environ.get("KEYED_TOKEN"))


class PlainBackend(KeyedBackend):
    """Declares nothing: cached on the default fields."""

    cache_key = None  # type: ignore[assignment]


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.BACKENDS, "keyed", f"{__name__}:KeyedBackend.from_target")
    monkeypatch.setitem(registry.BACKENDS, "keyed-too", f"{__name__}:KeyedBackend.from_target")
    monkeypatch.setitem(registry.BACKENDS, "plain", f"{__name__}:PlainBackend.from_target")
    monkeypatch.delenv("KEYED_TOKEN", raising=False)


def test_a_declared_cache_key_decides_what_shares_an_instance(
    registered: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    here, there = f"file://{tmp_path}/a", f"file://{tmp_path}/b"
    first = get_backend(kc.Target(backend="keyed", storage=here, namespace="one"))
    # Not in its key: another namespace, or another name registered to the same factory.
    assert get_backend(kc.Target(backend="keyed", storage=here, namespace="two")) is first
    assert get_backend(kc.Target(backend="keyed-too", storage=here)) is first
    assert get_backend(kc.Target(backend="keyed", storage=there)) is not first
    # Asked at every call: what the environment holds now counts.
    monkeypatch.setenv("KEYED_TOKEN", "rotated")
    rotated = get_backend(kc.Target(backend="keyed", storage=here))
    assert rotated is not first
    assert get_backend(kc.Target(backend="keyed", storage=here)) is rotated


def test_without_a_declared_key_the_default_fields_count(registered: None, tmp_path: Path) -> None:
    here = f"file://{tmp_path}/a"
    first = get_backend(kc.Target(backend="plain", storage=here, namespace="one"))
    assert get_backend(kc.Target(backend="plain", storage=here, namespace="one")) is first
    assert get_backend(kc.Target(backend="plain", storage=here, namespace="two")) is not first
