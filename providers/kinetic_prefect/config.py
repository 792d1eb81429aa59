"""Where a kinetic task's jobs run: the ``config=`` forms, their checks and target resolution."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from prefect.exceptions import ObjectNotFound

import kinetic_core as kc
from kinetic_prefect.blocks import KineticConfig

#: ``kinetic_core.Target`` fields a decorator keyword may set (``tags`` is Prefect's own keyword).
TARGET_FIELDS = frozenset(f.name for f in dataclasses.fields(kc.Target)) - {"tags"}
ConfigLike = str | KineticConfig | kc.Target | dict[str, Any] | None


def check_config(config: Any) -> ConfigLike:
    """Validate ``config=`` at decoration time (block names are looked up at run time)."""
    if config is None or isinstance(config, KineticConfig):
        return config
    if isinstance(config, str):
        if not config.strip():
            raise kc.ConfigError("config must be a KineticConfig block name, not an empty string.")
        return config
    if isinstance(config, kc.Target | dict):
        target = kc.Target.coerce(config)
        target.validate()
        return target
    raise kc.ConfigError(
        "config must be a KineticConfig block name, a KineticConfig, a kinetic_core.Target, "
        f"a dict or None, not {type(config).__name__}."
    )


async def load_config(name: str) -> KineticConfig:
    """Load a saved KineticConfig block; a clear ConfigError if there is none by that name."""
    try:
        return cast(KineticConfig, await KineticConfig.aload(name))
    except (ValueError, ObjectNotFound) as exc:
        raise kc.ConfigError(
            f"No KineticConfig block named {name!r} on this Prefect server. Create it with "
            f"KineticConfig(...).save({name!r}) (after `prefect block register -m kinetic_prefect`), "
            "or pass config=None to use KINETIC_* environment variables and defaults."
        ) from exc


async def resolve_target(config: ConfigLike, overrides: kc.Target) -> kc.Target:
    """Block/config, then decorator overrides, then KINETIC_* env and defaults; validated."""
    if isinstance(config, str):
        base = (await load_config(config)).to_target()
    elif isinstance(config, KineticConfig):
        base = config.to_target()
    else:
        base = kc.Target.coerce(config)
    return base.merge(overrides).resolve()
