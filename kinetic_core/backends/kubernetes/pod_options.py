"""The pod options of a Target (secret env, env_from, volumes, scheduling knobs) as plain data.

Checked here (``Target.validate`` asks the backend kind, ``kind.py``), before anything is
written anywhere, so a typo is a ``ConfigError`` naming the option and what to write
instead, whatever the backend; ``pod_spec.py`` turns the checked data into the pod spec. Everything here is JSON: a trigger or a block can carry it.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Any

from kinetic_core.errors import ConfigError
from kinetic_core.util.envvars import ENV_NAME

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
PULL_POLICIES = ("Always", "IfNotPresent", "Never")
#: Target fields checked by ``check_pod_options``.
POD_OPTIONS = (
    "secret_env",
    "env_from",
    "volumes",
    "image_pull_policy",
    "image_pull_secrets",
    "priority_class",
    "affinity",
    "security_context",
    "termination_grace_period",
    "ttl_after_finished",
    "active_deadline",
    "pod_template",
)
#: ``volumes`` sources: the key in the Target -> what it names.
VOLUME_SOURCES = {
    "pvc": "a PersistentVolumeClaim name",
    "secret": "a Secret name",
    "config_map": "a ConfigMap name",
    "empty_dir": "{} or {'medium': 'Memory', 'size_limit': '16Gi'}",
    "host_path": "an absolute path on the node",
}
_VOLUME_KEYS = frozenset({*VOLUME_SOURCES, "name", "read_only", "sub_path"})


@dataclass(frozen=True)
class Volume:
    """One entry of ``Target.volumes``, checked: mounted at ``mount_path`` as ``name``."""

    name: str
    mount_path: str
    source: str
    value: Any
    read_only: bool = False
    sub_path: str | None = None


def secret_ref(name: str, ref: Any) -> tuple[str, str]:
    """``"secret/key"`` -> (secret, key); ConfigError naming ``name`` otherwise."""
    secret, slash, key = ref.partition("/") if isinstance(ref, str) else ("", "", "")
    if not slash or not _DNS_SUBDOMAIN.match(secret) or not _SECRET_KEY.match(key):
        raise ConfigError(
            f"secret_env: {name} = {ref!r} is not a Secret reference: write 'secret-name/key' "
            "(the Secret in the job's namespace and the key within it)."
        )
    return secret, key


def check_secret_env(value: Any) -> dict[str, tuple[str, str]]:
    if not isinstance(value, dict):
        raise ConfigError(
            f"secret_env must be a dict {{'NAME': 'secret-name/key'}}, got {type(value).__name__}."
        )
    for name in value:
        if not isinstance(name, str) or not ENV_NAME.match(name):
            raise ConfigError(f"secret_env: {name!r} is not a valid environment variable name.")
    return {name: secret_ref(name, ref) for name, ref in value.items()}


def check_env_from(value: Any) -> list[dict[str, Any]]:
    """``[{'secret': name} | {'config_map': name}, optional 'prefix' and 'optional'}]``."""
    if not isinstance(value, list):
        raise ConfigError(
            "env_from must be a list like [{'secret': 'wandb'}, {'config_map': 'settings', "
            f"'prefix': 'APP_'}}], got {type(value).__name__}."
        )
    for item in value:
        sources = (
            [k for k in ("secret", "config_map") if k in item] if isinstance(item, dict) else []
        )
        extra = set(item) - {"secret", "config_map", "prefix", "optional"} if sources else set()
        if (
            len(sources) != 1
            or extra
            or not _DNS_SUBDOMAIN.match(str(item[sources[0]]))
            or not isinstance(item.get("prefix", ""), str)
            or not isinstance(item.get("optional", False), bool)
        ):
            raise ConfigError(
                f"env_from: {item!r} is not a source: write {{'secret': 'name'}} or "
                "{'config_map': 'name'}, with optional 'prefix' (str) and 'optional' (bool)."
            )
    return value


def _volume_name(mount_path: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", mount_path.lower()).strip("-")
    return ("vol-" + slug)[:63].rstrip("-") or "vol-root"


def check_volumes(value: Any) -> list[Volume]:
    """``{'/mount/path': {'pvc' | 'secret' | 'config_map' | 'empty_dir' | 'host_path': ...,
    'name'?, 'read_only'?, 'sub_path'?}}`` as Volumes; ConfigError on relative paths,
    unknown sources and name or path clashes."""
    if not isinstance(value, dict):
        raise ConfigError(
            "volumes must be a dict {'/mount/path': {'pvc': 'claim'}}, got "
            f"{type(value).__name__}."
        )
    volumes: list[Volume] = []
    for path, spec in value.items():
        if not isinstance(path, str) or not path.startswith("/"):
            raise ConfigError(
                f"volumes: mount path {path!r} is relative: use an absolute path like /data."
            )
        sources = [k for k in VOLUME_SOURCES if k in spec] if isinstance(spec, dict) else []
        if len(sources) != 1 or set(spec) - _VOLUME_KEYS:
            choices = "; ".join(f"{k!r}: {v}" for k, v in VOLUME_SOURCES.items())
            raise ConfigError(
                f"volumes: {path} = {spec!r} must name exactly one source ({choices}), with "
                "optional 'name', 'read_only' and 'sub_path'."
            )
        source = sources[0]
        _check_source(path, source, spec[source])
        name = spec.get("name") or _volume_name(path)
        if not isinstance(name, str) or not _DNS_LABEL.match(name):
            raise ConfigError(f"volumes: {path}: name {name!r} is not a DNS label (a-z0-9-).")
        volumes.append(
            Volume(
                name=name,
                mount_path=posixpath.normpath(path),
                source=source,
                value=spec[source],
                read_only=bool(spec.get("read_only", False)),
                sub_path=spec.get("sub_path"),
            )
        )
    check_unique("volumes", [v.mount_path for v in volumes], "mount path", "mount each once")
    check_unique("volumes", [v.name for v in volumes], "volume name", "set 'name' on one of them")
    return volumes


def _check_source(path: str, source: str, value: Any) -> None:
    if source == "empty_dir":
        ok = value is None or (
            isinstance(value, dict)
            and not set(value) - {"medium", "size_limit"}
            and value.get("medium", "") in ("", "Memory")
            and isinstance(value.get("size_limit", ""), str)
        )
    elif source == "host_path":
        ok = isinstance(value, str) and value.startswith("/")
    else:
        ok = isinstance(value, str) and bool(_DNS_SUBDOMAIN.match(value))
    if not ok:
        raise ConfigError(
            f"volumes: {path}: {source!r} must be {VOLUME_SOURCES[source]}, got {value!r}."
        )


def check_unique(option: str, names: list[str], what: str, fix: str) -> None:
    """ConfigError when ``names`` repeats one (a clash Kubernetes would reject later)."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ConfigError(f"{option}: {what} {name!r} is used twice: {fix}.")
        seen.add(name)


def check_pod_options(
    *,
    secret_env: Any = None,
    env_from: Any = None,
    volumes: Any = None,
    image_pull_policy: Any = None,
    image_pull_secrets: Any = None,
    priority_class: Any = None,
    affinity: Any = None,
    security_context: Any = None,
    termination_grace_period: Any = None,
    ttl_after_finished: Any = None,
    active_deadline: Any = None,
    pod_template: Any = None,
) -> None:
    """Every pod option that is set, checked as plain data (``Target.validate``)."""
    if secret_env is not None:
        check_secret_env(secret_env)
    if env_from is not None:
        check_env_from(env_from)
    if volumes is not None:
        check_volumes(volumes)
    if image_pull_policy is not None and image_pull_policy not in PULL_POLICIES:
        raise ConfigError(
            f"image_pull_policy must be one of {', '.join(PULL_POLICIES)}, got "
            f"{image_pull_policy!r}."
        )
    if image_pull_secrets is not None and not (
        isinstance(image_pull_secrets, list)
        and all(isinstance(s, str) and _DNS_SUBDOMAIN.match(s) for s in image_pull_secrets)
    ):
        raise ConfigError(
            f"image_pull_secrets must be a list of Secret names, got {image_pull_secrets!r}."
        )
    if priority_class is not None and not (
        isinstance(priority_class, str) and _DNS_SUBDOMAIN.match(priority_class)
    ):
        raise ConfigError(f"priority_class must be a PriorityClass name, got {priority_class!r}.")
    for name, value in (("affinity", affinity), ("security_context", security_context)):
        if value is not None and not isinstance(value, dict):
            raise ConfigError(
                f"{name} must be a dict as in a pod spec, got {type(value).__name__}."
            )
    for name, value in (
        ("termination_grace_period", termination_grace_period),
        ("ttl_after_finished", ttl_after_finished),
    ):
        if value is not None and (
            not isinstance(value, int) or isinstance(value, bool) or value < 0
        ):
            raise ConfigError(f"{name} must be a whole number of seconds >= 0, got {value!r}.")
    if active_deadline is not None and (
        not isinstance(active_deadline, int | float)
        or isinstance(active_deadline, bool)
        or active_deadline <= 0
    ):
        raise ConfigError(
            f"active_deadline must be a positive number of seconds, got {active_deadline!r}."
        )
    if pod_template is not None and not isinstance(pod_template, dict | str):
        raise ConfigError(
            "pod_template must be a pod spec (a dict) or the path of a YAML file holding one, "
            f"got {type(pod_template).__name__}."
        )
