"""The Target's pod options as pod spec fields, and ``pod_template`` merged under them.

The generated spec wins over the template wherever both set something; the engine owns only
the kinetic container's command (``runner``), its own labels and the signing-key Secret.
A template is checked field by field against the Kubernetes models (the 1.20 API server
drops unknown fields silently), so a typo is a ``ConfigError`` before anything is created.
"""

from __future__ import annotations

import os
import re
from typing import Any

from kinetic_core.backends.kubernetes.pod_options import (
    Volume,
    check_env_from,
    check_secret_env,
    check_unique,
    check_volumes,
)
from kinetic_core.config.target import Target
from kinetic_core.errors import ConfigError

#: The container that runs the job; its exit, result and logs are the job's.
KINETIC_CONTAINER = "runner"
_TEMPLATE_KEYS = frozenset({"apiVersion", "kind", "metadata", "spec"})
#: Lists merged by an identifying key (ours replace theirs); other lists are concatenated.
_KEYED_LISTS = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "imagePullSecrets": "name",
    "volumeMounts": "mountPath",
}


# ---- the Target's options -----------------------------------------------------------------
def pod_env(t: Target) -> list[dict[str, Any]]:
    """``secret_env`` as ``valueFrom.secretKeyRef`` entries (values stay in the Secret)."""
    refs = check_secret_env(t.secret_env or {})
    return [
        {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
        for name, (secret, key) in refs.items()
    ]


def container_options(t: Target) -> dict[str, Any]:
    """Fields of the kinetic container: envFrom, volumeMounts, imagePullPolicy."""
    env_from = [
        {
            ("secretRef" if "secret" in item else "configMapRef"): {
                "name": item.get("secret") or item["config_map"],
                **({"optional": item["optional"]} if "optional" in item else {}),
            },
            **({"prefix": item["prefix"]} if item.get("prefix") else {}),
        }
        for item in check_env_from(t.env_from or [])
    ]
    mounts = [
        {
            "name": v.name,
            "mountPath": v.mount_path,
            **({"readOnly": True} if v.read_only else {}),
            **({"subPath": v.sub_path} if v.sub_path else {}),
        }
        for v in check_volumes(t.volumes or {})
    ]
    return {
        **({"envFrom": env_from} if env_from else {}),
        **({"volumeMounts": mounts} if mounts else {}),
        **({"imagePullPolicy": t.image_pull_policy} if t.image_pull_policy else {}),
    }


def _volume(v: Volume) -> dict[str, Any]:
    if v.source == "pvc":
        source: dict[str, Any] = {"persistentVolumeClaim": {"claimName": v.value}}
    elif v.source == "secret":
        source = {"secret": {"secretName": v.value}}
    elif v.source == "config_map":
        source = {"configMap": {"name": v.value}}
    elif v.source == "host_path":
        source = {"hostPath": {"path": v.value}}
    else:
        opts = v.value or {}
        source = {
            "emptyDir": {
                **({"medium": opts["medium"]} if opts.get("medium") else {}),
                **({"sizeLimit": opts["size_limit"]} if opts.get("size_limit") else {}),
            }
        }
    return {"name": v.name, **source}


def pod_spec_options(t: Target) -> dict[str, Any]:
    """Pod-level fields: volumes, image pull secrets, priority, affinity, security, grace."""
    for name, value, model in (
        ("affinity", t.affinity, "V1Affinity"),
        ("security_context", t.security_context, "V1PodSecurityContext"),
    ):
        if value is not None:
            check_fields(value, model, name)
    volumes = [_volume(v) for v in check_volumes(t.volumes or {})]
    pairs: list[tuple[str, Any]] = [
        ("volumes", volumes or None),
        ("imagePullSecrets", [{"name": s} for s in t.image_pull_secrets or []] or None),
        ("priorityClassName", t.priority_class),
        ("affinity", t.affinity),
        ("securityContext", t.security_context),
        ("terminationGracePeriodSeconds", t.termination_grace_period),
    ]
    return {key: value for key, value in pairs if value is not None}


# ---- pod_template ---------------------------------------------------------------------------
def load_pod_template(value: dict[str, Any] | str | None) -> dict[str, Any]:
    """``{"metadata": ..., "spec": ...}`` from a pod spec, a pod (template) manifest or a
    YAML file holding either; ConfigError saying what is wrong with it."""
    if value is None:
        return {"metadata": {}, "spec": {}}
    if isinstance(value, str):
        value = _read_yaml(value)
    if not isinstance(value, dict):
        raise ConfigError(
            f"pod_template must be a mapping (a pod spec), got {type(value).__name__}."
        )
    if "spec" in value and set(value) <= _TEMPLATE_KEYS:
        if value.get("kind", "Pod") not in ("Pod", "PodTemplate"):
            raise ConfigError(
                f"pod_template is a {value['kind']}: give a pod spec, a Pod or a PodTemplate."
            )
        metadata, spec = value.get("metadata") or {}, value["spec"]
    else:
        metadata, spec = {}, value
    check_fields(metadata, "V1ObjectMeta", "pod_template.metadata")
    check_fields(spec, "V1PodSpec", "pod_template")
    for kind in ("containers", "initContainers"):
        for i, container in enumerate(spec.get(kind) or []):
            if not container.get("name"):
                raise ConfigError(f"pod_template.{kind}[{i}] has no name: name it.")
    return {"metadata": metadata, "spec": spec}


def _read_yaml(path: str) -> Any:
    import yaml

    try:
        with open(os.path.expanduser(path)) as fh:
            return yaml.safe_load(fh)
    except OSError as exc:
        raise ConfigError(
            f"pod_template: cannot read {path!r} ({exc.strerror}): give the path of a YAML "
            "file holding a pod spec, or the spec itself as a dict."
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"pod_template: {path!r} is not valid YAML: {exc}") from None


def merge_pod_template(
    generated: dict[str, Any], template: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(pod metadata from the template, ``generated`` merged over the template's spec)."""
    theirs = template["spec"]
    ours_volumes = {v["name"]: v for v in generated.get("volumes", [])}
    for volume in theirs.get("volumes") or []:
        if volume.get("name") in ours_volumes and volume != ours_volumes[volume["name"]]:
            raise ConfigError(
                f"volumes: volume name {volume['name']!r} is also defined in pod_template: "
                "rename one of them (Target volumes take 'name')."
            )
    check_unique(
        "pod_template",
        [c.get("name") for c in theirs.get("containers") or []],
        "container name",
        "name each container once",
    )
    spec = _merge(generated, theirs)
    runner = spec["containers"][0]
    runner["command"] = generated["containers"][0]["command"]  # the engine's, always
    runner.pop("args", None)
    return dict(template["metadata"]), spec


def _merge(ours: Any, theirs: Any, key: str = "") -> Any:
    if isinstance(ours, dict) and isinstance(theirs, dict):
        merged = dict(theirs)
        for k, v in ours.items():
            merged[k] = _merge(v, theirs[k], k) if k in theirs else v
        return merged
    if isinstance(ours, list) and isinstance(theirs, list):
        ident = _KEYED_LISTS.get(key)
        if ident is None:
            return [*ours, *(item for item in theirs if item not in ours)]
        by_id = {item.get(ident): item for item in theirs if isinstance(item, dict)}
        merged_items = [
            _merge(item, by_id[item[ident]]) if item.get(ident) in by_id else item for item in ours
        ]
        ours_ids = {item.get(ident) for item in ours}
        return [*merged_items, *(item for item in theirs if item.get(ident) not in ours_ids)]
    return ours


# ---- field check against the Kubernetes models ----------------------------------------------
def check_fields(value: Any, kind: str, where: str) -> None:
    """ConfigError naming the first field of ``value`` that the model ``kind`` lacks."""
    from kubernetes.client import models

    listed = re.fullmatch(r"[Ll]ist\[(.+)\]", kind)
    if listed:
        if not isinstance(value, list):
            raise ConfigError(f"{where} must be a list, got {type(value).__name__}.")
        for i, item in enumerate(value):
            check_fields(item, listed[1], f"{where}[{i}]")
        return
    model = getattr(models, kind, None) if kind.startswith("V1") else None
    if model is None:
        return  # a scalar or a free-form map: the API server checks values
    if not isinstance(value, dict):
        raise ConfigError(f"{where} must be a mapping ({kind[2:]}), got {value!r}.")
    attrs = {key: attr for attr, key in model.attribute_map.items()}
    for key, item in value.items():
        if key not in attrs:
            raise ConfigError(
                f"{where}: {key!r} is not a field of a Kubernetes {kind[2:]} "
                f"(valid: {', '.join(sorted(attrs))})."
            )
        check_fields(item, model.openapi_types[attrs[key]], f"{where}.{key}")
