"""The launch record: which process is a local job's supervisor, bound to the job.

The supervisor writes ``launch.json`` itself, create-only, as its first act: whoever
forked it, a record exists before any job code runs. The record names the job id and,
when a signing key is set, carries an HMAC of its fields, so a record copied from another
job or written by hand is refused before its pid is ever signalled. Stdlib only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from typing import Any

LAUNCH = "launch.json"
EXIT = "exit.json"
LOG = "output.log"


def _mac(key: str, record: dict[str, Any]) -> str:
    fields = {k: v for k, v in record.items() if k != "hmac"}
    return hmac.new(
        key.encode(), json.dumps(fields, sort_keys=True).encode(), hashlib.sha256
    ).hexdigest()


def sign(record: dict[str, Any], key: str | None) -> dict[str, Any]:
    return {**record, "hmac": _mac(key, record) if key else None}


def verify(record: dict[str, Any], job_id: str, key: str | None) -> str | None:
    """Why the record must not be trusted for ``job_id``; None if it can be."""
    if record.get("job_id") != job_id:
        return f"it names job {record.get('job_id')!r}"
    if not isinstance(record.get("pid"), int) or record["pid"] <= 1:
        return "it names no valid pid"
    if key and not hmac.compare_digest(str(record.get("hmac") or ""), _mac(key, record)):
        return "its signature does not match the signing key"
    return None


def write_create_only(path: str, record: dict[str, Any]) -> None:
    """Write ``record`` at ``path`` atomically; FileExistsError if one is there, and
    FileNotFoundError if the job's directory is gone (its launch was aborted)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "x") as fh:
        json.dump(record, fh)
    try:
        os.link(tmp, path)
    finally:
        os.unlink(tmp)


def write(path: str, record: dict[str, Any]) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        json.dump(record, fh)
    os.replace(tmp, path)
