"""``Target.env``: which environment variables a job gets, as plain data.

A list names variables (or glob patterns such as ``WANDB_*``) whose values are captured
from the submitter's environment; a dict maps a name to a literal value, or to ``None``
to capture it. Captured values travel inside the signed call envelope (they may be
secrets); literal values are configuration and also appear in a Kubernetes Job's spec.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from typing import Any

from kinetic_core.errors import ConfigError

#: What Kubernetes accepts as an environment variable name (and what a shell can export).
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_PATTERN = re.compile(r"^[-._a-zA-Z0-9*?\[\]!]+$")
_GLOB = frozenset("*?[")


def is_pattern(name: str) -> bool:
    return any(c in _GLOB for c in name)


def env_spec(env: Any) -> dict[str, str | None]:
    """``env`` as ``{name or pattern: literal value, or None to capture}``; ConfigError
    naming the entry when it is malformed."""
    if env is None:
        return {}
    if isinstance(env, list | tuple):
        env = dict.fromkeys(env)
    if not isinstance(env, dict):
        raise ConfigError(
            f"env must be a list of variable names or patterns to capture (['WANDB_*']) or a "
            f"dict of literal values ({{'NAME': 'value'}}), got {type(env).__name__}."
        )
    for name, value in env.items():
        if not isinstance(name, str) or not _PATTERN.match(name):
            raise ConfigError(
                f"env: {name!r} is not an environment variable name or glob pattern "
                "(letters, digits, '_', '-', '.', and * ? [ ] in patterns)."
            )
        if value is None:
            continue
        if is_pattern(name):
            raise ConfigError(
                f"env: pattern {name!r} has a literal value; a pattern only captures "
                f"variables: use {{{name!r}: None}} or list it."
            )
        if not isinstance(value, str):
            raise ConfigError(
                f"env: the value of {name} must be a string (quote it), got {value!r}."
            )
        if not ENV_NAME.match(name):
            raise ConfigError(f"env: {name!r} is not a valid environment variable name.")
    return env


def literal_env(env: Any) -> dict[str, str]:
    """The literal values of ``env`` (those that may appear in a pod spec)."""
    return {k: v for k, v in env_spec(env).items() if v is not None}


def job_env(env: Any, environ: Mapping[str, str]) -> dict[str, str]:
    """Every variable the job gets: captured names and patterns (from ``environ``) plus the
    literal values. ConfigError when a captured name (not a pattern) is not set."""
    spec = env_spec(env)
    captured = [n for n, v in spec.items() if v is None]
    missing = [n for n in captured if not is_pattern(n) and n not in environ]
    if missing:
        raise ConfigError(
            f"Target.env names {missing}, which are not set in this environment: set them "
            "before submitting, give a literal value ({'NAME': 'value'}), or use a pattern."
        )
    values = {
        name: environ[name]
        for name in environ
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in captured)
    }
    values.update(literal_env(spec))
    return values
