"""A package's names loaded on first use: its ``__getattr__`` (PEP 562) from a table of
name -> module, so importing the package (a backend's, whose kind every ``Target.validate``
asks) costs nothing until a name is used."""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not `from typing import ...`: the local supervisor imports this
if TYPE_CHECKING:
    from collections.abc import Callable


def exports(package: str, table: dict[str, str]) -> Callable[[str], object]:
    """``__getattr__`` for ``package``: ``table[name]`` is the module (absolute, or
    relative to ``package`` when it has no dot) that holds ``name``."""

    def __getattr__(name: str) -> object:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        path = module if "." in module else f"{package}.{module}"
        return getattr(importlib.import_module(path), name)

    return __getattr__
