"""Job and group ids: validated before they ever become a path or a resource name."""

from __future__ import annotations

import re

from kinetic_core.errors import InvalidIdError

ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{2,62}$")


def validate_id(value: str, kind: str = "job id") -> str:
    """Return ``value`` if it is a safe id, else raise :class:`InvalidIdError`."""
    if not isinstance(value, str) or not ID_PATTERN.fullmatch(value):
        raise InvalidIdError(
            f"Invalid {kind} {value!r}: ids must match {ID_PATTERN.pattern} "
            "(3-63 lowercase letters, digits and '-', starting with a letter or digit). "
            "Copy the id exactly as `kinetic jobs list` prints it."
        )
    return value


def slug(name: str, max_len: int = 20) -> str:
    """A lowercase, dash-separated prefix derived from a human name (may be empty)."""
    text = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return text[:max_len].strip("-")


def new_id(name: str = "job") -> str:
    """A fresh, sortable, collision-resistant id such as ``train-20261121t043000-3f9a2c1d``."""
    import secrets
    import time

    prefix = slug(name) or "job"
    stamp = time.strftime("%Y%m%dt%H%M%S", time.gmtime())
    return f"{prefix}-{stamp}-{secrets.token_hex(4)}"


def key_digest(idempotency_key: str) -> str:
    import hashlib  # here: a runner validates ids before its job starts, and hashes none

    return hashlib.sha256(idempotency_key.encode()).hexdigest()


def keyed_id(idempotency_key: str, attempt: int) -> str:
    """Deterministic id of attempt ``attempt`` of an idempotency key.

    Deterministic ids make create-only ``handle.json`` the lock that lets exactly one
    of many concurrent submitters win a given attempt.
    """
    return f"k{key_digest(idempotency_key)[:24]}-{attempt}"


#: A job submitted without an idempotency key recovers under ``recovery:{job_id}``.
RECOVERY_KEY_PREFIX = "recovery:"


def recovery_key(job_id: str) -> str:
    return f"{RECOVERY_KEY_PREFIX}{job_id}"


def attempt_id(idempotency_key: str, attempt: int) -> str:
    """The job id of attempt ``attempt`` of a key: ``keyed_id``, except attempt 1 of a
    recovery key, which is the job that was submitted without a key (validated: the key
    comes from a record)."""
    if attempt == 1 and idempotency_key.startswith(RECOVERY_KEY_PREFIX):
        return validate_id(idempotency_key[len(RECOVERY_KEY_PREFIX) :])
    return keyed_id(idempotency_key, attempt)
