"""A kubeconfig given as content (a connection or block field) stays in memory, never on disk.

``Target.kubeconfig`` is a path or the kubeconfig's YAML. Content is a secret: wherever a
Target is serialized (handles, XCom, trigger kwargs, logs) it is replaced by a reference
(``kubeconfig-sha256:<hex>``) that names it without revealing it. Every process that builds
a Target from the content (the connection, the block) remembers it, so a handle read back
in that process reaches the same cluster; the Kubernetes backend's ``client.py`` resolves it.
It sits with the Target (``target.py`` serializes through it), not in the backend: knowing
what to hide needs no Kubernetes code.
"""

from __future__ import annotations

import hashlib
import threading

REFERENCE_PREFIX = "kubeconfig-sha256:"
_known: dict[str, str] = {}
_lock = threading.Lock()


def is_content(value: str | None) -> bool:
    """A kubeconfig's text rather than a file path (YAML spans lines; JSON is an object)."""
    return isinstance(value, str) and ("\n" in value or value.lstrip().startswith("{"))


def kubeconfig_reference(value: str) -> str:
    """``value`` when it is a path or reference; the content's reference otherwise."""
    if not is_content(value):
        return value
    return REFERENCE_PREFIX + hashlib.sha256(value.encode()).hexdigest()


def remember_kubeconfig(value: str | None) -> None:
    """Keep content in this process so its reference can be resolved later."""
    if value is not None and is_content(value):
        reference = kubeconfig_reference(value)
        with _lock:
            _known[reference] = value


def kubeconfig_content(value: str | None) -> str | None:
    """The content behind ``value`` (content itself, or a reference seen in this process);
    None for a path, an unset value, or a reference this process never saw."""
    if value is None:
        return None
    if is_content(value):
        return value
    with _lock:
        return _known.get(value)


def is_reference(value: str | None) -> bool:
    return isinstance(value, str) and value.startswith(REFERENCE_PREFIX)
