"""A call checked and named: its arguments bound to the function's signature at submit, and
its fingerprint (which function with which arguments, as a digest kept in the handle).

Binding at submit finds a missing or unexpected argument before any job exists (a job
would only fail with the same TypeError once it ran).

A keyed submit compares it with the fingerprint of the job its key already has, so a
submit of *another* call under a key in flight is told so instead of silently getting the
old job's value. The fingerprint is ``{module}.{qualname}:{sha256}``: the function's name in
clear (people read it in the error), the arguments only as a digest, and never the captured
environment (where secrets travel). Equal calls made in another process (an Airflow or
Prefect retry) give the same digest: arguments count by parameter name, whether passed by
position or keyword, and sets are sorted, since their iteration order changes with
``PYTHONHASHSEED``.
"""

from __future__ import annotations

import hashlib
import inspect
import pickle
from typing import Any

__all__ = ["bind_call", "call_fingerprint", "function_name"]


def bind_call(fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments by parameter name, defaults applied (``f(1)`` and ``f(a=1)``
    are one call). TypeError, as calling it would raise, for arguments the signature does
    not take; a callable without a readable signature (some builtins) is not checked."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return {"args": args, "kwargs": kwargs}
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def function_name(fn: Any) -> str:
    """``module.qualname`` of a callable (its type's for a callable object)."""
    named = fn if hasattr(fn, "__qualname__") else type(fn)
    return f"{getattr(named, '__module__', '?')}.{getattr(named, '__qualname__', '?')}"


def call_fingerprint(fn: Any, arguments: dict[str, Any]) -> str:
    """The fingerprint of calling ``fn`` with ``arguments`` (``bind_call``'s answer)."""
    digest = hashlib.sha256()
    _feed(digest, sorted(arguments.items()))
    return f"{function_name(fn)}:{digest.hexdigest()[:32]}"


def _feed(digest: Any, value: Any) -> None:
    """Add ``value`` to ``digest`` in a form that does not depend on the process."""
    if isinstance(value, list | tuple):
        digest.update(b"(" if isinstance(value, tuple) else b"[")
        for item in value:
            _feed(digest, item)
        digest.update(b")")
    elif isinstance(value, dict):
        digest.update(b"{")
        for key, item in value.items():  # insertion order: dicts keep it across processes
            _feed(digest, key)
            _feed(digest, item)
        digest.update(b"}")
    elif isinstance(value, set | frozenset):
        parts = sorted(_leaf(item) for item in value)
        digest.update(b"<" + b"".join(parts) + b">")
    else:
        digest.update(_leaf(value))


def _leaf(value: Any) -> bytes:
    """A digest of one value: its pickle (cloudpickle for what pickle cannot name, such as a
    lambda); a value neither can pickle counts by its type alone (submit refuses it anyway)."""
    try:
        raw = pickle.dumps(value, protocol=4)
    except Exception:
        try:
            import cloudpickle

            raw = cloudpickle.dumps(value, protocol=4)
        except Exception:
            raw = repr(type(value)).encode()
    return hashlib.sha256(raw).digest()
