"""HMAC-SHA256 over canonical JSON: the one way kinetic signs a record or an envelope header."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from typing import Any


def key_in_force(explicit: str | None) -> str | None:
    """The signing key that applies now: ``explicit`` if given, else ``KINETIC_SIGNING_KEY``
    as the environment holds it at this moment (a rotated secret applies from then on)."""
    return explicit or os.environ.get("KINETIC_SIGNING_KEY") or None


def mac(signing_key: str, fields: dict[str, Any]) -> str:
    """The signature of ``fields`` (sorted-key JSON) under ``signing_key``."""
    data = json.dumps(fields, sort_keys=True).encode()
    return hmac.new(signing_key.encode(), data, hashlib.sha256).hexdigest()


def valid(signing_key: str, fields: dict[str, Any], signature: Any) -> bool:
    """Constant-time check that ``signature`` signs ``fields``."""
    return isinstance(signature, str) and hmac.compare_digest(signature, mac(signing_key, fields))
