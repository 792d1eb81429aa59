"""HMAC-SHA256 over canonical JSON: the one way kinetic signs a record or an envelope header."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any


def mac(signing_key: str, fields: dict[str, Any]) -> str:
    """The signature of ``fields`` (sorted-key JSON) under ``signing_key``."""
    data = json.dumps(fields, sort_keys=True).encode()
    return hmac.new(signing_key.encode(), data, hashlib.sha256).hexdigest()


def valid(signing_key: str, fields: dict[str, Any], signature: Any) -> bool:
    """Constant-time check that ``signature`` signs ``fields``."""
    return isinstance(signature, str) and hmac.compare_digest(signature, mac(signing_key, fields))
