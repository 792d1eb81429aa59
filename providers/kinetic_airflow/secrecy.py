"""Keep the signing key out of templated fields: Airflow renders, stores and shows those.

An operator given ``target=Target(signing_key=...)`` (or a dict or JSON text naming
``signing_key``) keeps the key in a private attribute that is not templated, not
serialized with the DAG and not pushed to XCom; only ``resolve_target`` adds it back.
"""

from __future__ import annotations

import json
from typing import Any

import kinetic_core as kc

TemplatedTarget = dict[str, Any] | str | None


def split_signing_key(
    target: kc.Target | dict[str, Any] | str | None,
) -> tuple[TemplatedTarget, str | None]:
    """``target`` without its signing key (safe to template), and the key (or None)."""
    if isinstance(target, kc.Target):
        return target.to_dict(), target.signing_key
    if isinstance(target, dict):
        public = {k: v for k, v in target.items() if k != "signing_key"}
        return public, target.get("signing_key")
    if isinstance(target, str) and "signing_key" in target:
        try:
            data = json.loads(target)
        except ValueError:
            return target, None  # a template: refused once rendered, see refuse_rendered_key
        if isinstance(data, dict):
            key = data.pop("signing_key", None)
            return json.dumps(data), key
    return target, None


def refuse_rendered_key(overrides: dict[str, Any] | None, task_id: str) -> None:
    """A key that only appeared when the target was rendered has already been stored by
    Airflow as a rendered field: refuse it so it is moved where it stays secret."""
    if overrides and overrides.get("signing_key"):
        raise kc.ConfigError(
            f"Task {task_id}: the templated target renders a signing_key, which Airflow stores "
            "and shows as a rendered field. Put the key in the kinetic connection's password, "
            "in KINETIC_SIGNING_KEY, or pass target=kinetic_core.Target(signing_key=...) "
            "(kept out of templated fields)."
        )


def with_signing_key(
    rendered: TemplatedTarget, signing_key: str | None, task_id: str
) -> dict[str, Any] | None:
    """The rendered target (a dict, JSON text or None) plus the operator's private key:
    the overrides to resolve the target with. Raises ValueError on malformed JSON."""
    overrides = json.loads(rendered.strip() or "null") if isinstance(rendered, str) else rendered
    refuse_rendered_key(overrides, task_id)
    if not signing_key:
        return overrides
    return {**(overrides or {}), "signing_key": signing_key}
