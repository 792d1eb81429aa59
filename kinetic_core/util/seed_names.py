"""The seed kinetic's spellings, accepted with a DeprecationWarning that names ours.

Code written for kinetic (``handle.cleanup(k8s=..., gcs=...)``, ``handle.k8s_name``, an
``on_status_change`` callback reading ``s.value``) keeps working for now, and says once per
place what to write instead; a name with no meaning here fails at once, naming what to do.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

__all__ = ["old_keywords", "said"]


def said(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` (kinetic's spelling) is ``new`` here."""
    warnings.warn(
        f"{old} is the kinetic spelling: use {new} (the old name will be removed).",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def old_keywords(
    call: str,
    given: Mapping[str, Any],
    renamed: Mapping[str, str],
    unneeded: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The new keyword arguments for the old ones ``given`` to ``call``: each of
    ``renamed`` (old -> new) is mapped with a warning; each of ``unneeded`` (old -> why it
    has no use here) is dropped with a warning saying why; anything else is a TypeError,
    as Python raises for an unknown keyword."""
    unneeded = unneeded or {}
    new: dict[str, Any] = {}
    for name, value in given.items():
        if name in renamed:
            said(f"{call}({name}=)", f"{call}({renamed[name]}=)", stacklevel=4)
            new[renamed[name]] = value
        elif name in unneeded:
            warnings.warn(
                f"{call}({name}=) is a kinetic argument with no use here: {unneeded[name]}. "
                "Drop it (it will be refused in a later version).",
                DeprecationWarning,
                stacklevel=4,
            )
        else:
            raise TypeError(f"{call}() got an unexpected keyword argument {name!r}")
    return new
