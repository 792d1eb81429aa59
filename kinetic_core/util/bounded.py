"""A repr bounded in size and in time: what a job's value looks like, made in the job.

A value's ``__repr__`` is the job's own code: it may be slow, endless, or build a huge
string. It runs in a worker thread that is waited on for at most ``seconds``: past that the
caller goes on without it (the thread is a daemon: it ends with the process). Containers
are cut while the repr is built (``reprlib``), and the text once more after it.
"""

from __future__ import annotations

import _thread
import reprlib
import threading
from typing import Any, NamedTuple

__all__ = ["Bounded", "bounded_repr", "cut"]


class Bounded(NamedTuple):
    """The repr, and in words what is missing or cut ('' when nothing is)."""

    text: str
    note: str


def cut(text: str, limit: int) -> tuple[str, str]:
    """``text`` cut to ``limit`` characters, and a note saying how much was cut."""
    if len(text) <= limit:
        return text, ""
    return text[:limit], f"cut at {limit} of {len(text)} characters"


class _Shorter(reprlib.Repr):
    """reprlib, cutting binary values before their repr as it does strings: its fallback
    makes the whole repr and cuts after (~4 bytes per byte: 4 GiB for a 1 GiB result,
    built in one C call that holds the GIL, which no time limit interrupts)."""

    repr_bytes = reprlib.Repr.repr_str
    repr_bytearray = reprlib.Repr.repr_str


def _repr_of(value: Any, limit: int) -> str:
    shorter = _Shorter()
    shorter.maxstring = shorter.maxother = limit
    shorter.maxlist = shorter.maxtuple = shorter.maxdict = shorter.maxset = 50
    shorter.maxfrozenset = shorter.maxdeque = shorter.maxarray = 50
    shorter.maxlevel = 4
    return shorter.repr(value)


def bounded_repr(value: Any, *, limit: int, seconds: float) -> Bounded:
    """The repr of ``value`` in at most ``limit`` characters, made within ``seconds``.

    Never raises: a repr that raises or outlasts ``seconds`` gives empty text and a note
    saying so. ``_thread`` rather than ``threading.Thread``: no wait for the thread to be
    scheduled, and the thread never holds up the interpreter's exit."""
    done = threading.Event()
    box: list[Bounded] = []

    def make() -> None:
        try:
            box.append(Bounded(*cut(_repr_of(value, limit), limit)))
        except BaseException as exc:  # the value's own code: anything may come out
            box.append(Bounded("", f"its repr raised {type(exc).__name__}"))
        finally:
            done.set()

    _thread.start_new_thread(make, ())
    if not done.wait(seconds):
        return Bounded("", f"its repr took longer than {seconds:g} s")
    return box[0]
