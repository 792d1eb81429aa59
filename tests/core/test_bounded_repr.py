"""A preview's repr of a large binary value is made from its ends, never in full.

The runner makes the preview of every result (``records/preview.py``). reprlib cuts a
``str`` before calling ``repr`` but not ``bytes``: the repr of a 1 GiB ``bytes`` result was
built whole (a second GiB in the job, seconds of one core holding the GIL, so the
preview's time limit could not even interrupt it) to be cut to 2,000 characters after.
"""

from __future__ import annotations

import tracemalloc

import pytest

from kinetic_core.util.bounded import bounded_repr

SIZE = 32 << 20


@pytest.mark.parametrize("kind", [bytes, bytearray])
def test_a_large_binary_value_is_cut_before_its_repr_is_made(kind: type) -> None:
    value = kind(b"a" * (SIZE // 2) + b"z" * (SIZE // 2))
    tracemalloc.start()
    try:
        shown = bounded_repr(value, limit=2000, seconds=30.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < SIZE // 16, f"the repr allocated {peak} bytes for a {SIZE}-byte value"
    assert len(shown.text) <= 2000
    assert shown.text.startswith("b'aaa" if kind is bytes else "bytearray(b'aaa")
    assert "..." in shown.text and shown.text.rstrip("')").endswith("zzz")


def test_a_short_binary_value_is_shown_whole() -> None:
    assert bounded_repr(b"\x00ab", limit=2000, seconds=30.0).text == repr(b"\x00ab")
    assert bounded_repr(bytearray(b"ab"), limit=2000, seconds=30.0).text == "bytearray(b'ab')"
