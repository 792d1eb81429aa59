"""``find_data``: the Data a call's arguments hold, as ``submit`` finds them."""

from __future__ import annotations

from dataclasses import dataclass

import kinetic_core as kc


@dataclass
class Config:
    train: kc.Data
    note: str = ""


def test_every_data_once_in_order_however_nested() -> None:
    a, b, c = kc.Data("/a"), kc.Data("gs://bucket/b/"), kc.Data("/c")
    args = ([a, {"x": (b,)}], {"cfg": Config(c), "again": a, "n": 3, "s": {c}})
    assert kc.find_data(args) == [a, b, c]
    assert kc.find_data(([1, "x"], {})) == []
