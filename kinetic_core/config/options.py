"""The Target's options described for forms: name, type, help text, an example, secrecy.

Providers build their saved configurations from this (the Prefect block's fields, the
Airflow connection form), so an option added to ``Target`` appears there without a list
per provider that could drift. Help and example come from the field's ``metadata``
(``field(default=None, metadata={"help": ..., "example": ...})``) or, for the fields
declared before that, from ``_DESCRIBED`` below.
"""

from __future__ import annotations

import dataclasses
import json
import types
from dataclasses import dataclass
from functools import cache
from typing import Any, Union, get_args, get_origin, get_type_hints

from kinetic_core.config.target import SECRET_FIELDS, Target, _parse_env
from kinetic_core.errors import ConfigError

__all__ = ["TargetOption", "target_options"]

_JSON_TYPES: dict[Any, str] = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    list: "array",
    dict: "object",
}

#: name -> (help, example) for the fields that carry no ``metadata``.
_DESCRIBED: dict[str, tuple[str, Any]] = {
    "backend": ("Where jobs run: local, kubernetes, gke or slurm.", "gke"),
    "storage": (
        "Storage root: file:///abs/path, file://~/dir or gs://bucket/prefix.",
        "gs://my-bucket/kinetic",
    ),
    "namespace": ("Kubernetes namespace of the jobs.", "ml"),
    "image": ("Container image of Kubernetes jobs.", "us-docker.pkg.dev/proj/repo/kinetic:1"),
    "accelerator": ("Default accelerator, e.g. tpu-v5e-8, gpu-l4 (empty: CPU).", "tpu-v5e-8"),
    "spot": ("Run on spot / preemptible capacity.", True),
    "resources": ("Pod resources, as in a pod spec.", {"requests": {"cpu": "2"}}),
    "service_account": ("Kubernetes service account of the job's pod.", "kinetic-runner"),
    "kube_context": ("kubeconfig context to use.", "gke_proj_zone_cluster"),
    "kubeconfig": (
        "Path of a kubeconfig file, or its content (kept secret); default $KUBECONFIG.",
        "/etc/kube/config",
    ),
    "in_cluster": (
        "Use the pod's service account (a worker in the cluster) instead of a kubeconfig.",
        True,
    ),
    "node_selector": (
        "Node labels the job's pod must run on.",
        {"cloud.google.com/gke-nodepool": "tpu"},
    ),
    "tolerations": (
        "Pod tolerations, as in a pod spec.",
        [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}],
    ),
    "labels": ("Labels on the job's pod.", {"team": "ml"}),
    "annotations": ("Annotations on the job's pod.", {"owner": "nightly"}),
    "project": ("Cloud project (GKE, GCS; links to the Cloud Console).", "my-gcp-project"),
    "secret_env": ('Env vars from Secrets: {"NAME": "secret-name/key"}.', {"API_KEY": "wandb/key"}),
    "env_from": (
        'Whole Secrets / ConfigMaps as env: [{"secret": "name"}, {"config_map": "name"}].',
        [{"config_map": "settings", "prefix": "APP_"}],
    ),
    "volumes": (
        'Pod mounts: {"/data": {"pvc": "claim"}} (also empty_dir, secret, config_map, host_path).',
        {"/dev/shm": {"empty_dir": {"medium": "Memory", "size_limit": "16Gi"}}},
    ),
    "image_pull_policy": ("Always, IfNotPresent or Never.", "Always"),
    "image_pull_secrets": ("Secrets holding registry credentials.", ["registry"]),
    "priority_class": ("PriorityClass of the job's pod.", "batch"),
    "affinity": ("Pod affinity, as in a pod spec.", {"nodeAffinity": {}}),
    "security_context": ("The pod's securityContext, as in a pod spec.", {"runAsUser": 1000}),
    "termination_grace_period": ("Seconds between SIGTERM and SIGKILL.", 30),
    "ttl_after_finished": ("Seconds a finished Job is kept (default 86400).", 3600),
    "active_deadline": ("Seconds the cluster lets the Job run (default: life_span).", 7200.0),
    "pod_template": (
        "A pod spec (or the path of a YAML file) merged under the generated one.",
        {"containers": [{"name": "log-shipper", "image": "fluent-bit"}]},
    ),
    "local_dir": (
        "Local backend: where supervisor records and logs live (default: beside the storage).",
        "/var/lib/kinetic",
    ),
    "env": (
        'Env vars: names or patterns (WANDB_*) captured at submit, or {"NAME": "literal"}.',
        {"MODE": "nightly", "WANDB_*": None},
    ),
    "life_span": ("Max seconds a job may run.", 86400.0),
    "schedule_timeout": ("Max seconds a job may stay pending.", 900.0),
    "poll_interval": ("Steady-state seconds between status polls.", 5.0),
    "lost_grace": (
        "Seconds a job the backend no longer shows (never seen after submit, or its node "
        "unreachable) gets before it reads FAILED Lost (default 120).",
        120.0,
    ),
    "pickle_by_value": (
        "Modules shipped with the function because the image lacks them.",
        ["mylib"],
    ),
    "tags": ("Tags added to every job.", {"team": "ml"}),
    "output_dir": (
        "Where the job's outputs go: gs://bucket/path or file:///abs/path; each job writes "
        "under {output_dir}/{job_id}/ (default: outputs/{job_id}/ in the storage root).",
        "gs://my-bucket/models/nightly",
    ),
    "debug": (
        "Keep a failed job's processes (local) or pod (Kubernetes) for 24 h to inspect it; "
        "`kinetic jobs cleanup ID` removes them.",
        True,
    ),
    "max_recoveries": (
        "Restarts after a preemption, a lost job or a listed exit code (default: 3 with "
        "spot, else 0; 0 turns recovery off).",
        2,
    ),
    "recover_on_exit_codes": ("Exit codes that also start a recovery.", [75, 143]),
    "requirements": (
        "Extra packages installed by uv at pod start (pip requirement strings).",
        ["rich==13.7.1"],
    ),
    "num_hosts": (
        "Hosts (one pod, or one Slurm node, each) a GPU job spans; a TPU slice shape fixes "
        "its own count.",
        1,
    ),
    "queue": (
        "Kueue LocalQueue that admits the job (label kueue.x-k8s.io/queue-name); the job "
        "waits PENDING 'Queued' until admitted.",
        "team-a",
    ),
    "priority": (
        "Kueue WorkloadPriorityClass of the job (label kueue.x-k8s.io/priority-class).",
        "high",
    ),
    "queue_timeout": (
        "Max seconds a queued job may wait for Kueue's admission (not counted in life_span).",
        86400.0,
    ),
    "prices": (
        "Price table for Usage.cost: accelerator (or family: tpu-v5e) -> price per chip-hour "
        '{"on_demand": .., "spot": ..}, optional "currency"; or a JSON/YAML file path. '
        "Your own prices: kinetic ships none (the example figures are made up).",
        {"tpu-v5e": {"on_demand": 1.2, "spot": 0.5}, "currency": "USD"},
    ),
    "signing_key": ("HMAC key that signs payloads and results (keep it secret).", "s3cret"),
}


@dataclass(frozen=True)
class TargetOption:
    """One ``Target`` field as a form shows it. ``secret``: never shown or serialized
    (``repr=False`` on the field), so a saved configuration keeps it in its own secret field."""

    name: str
    annotation: Any  # the field's type, e.g. ``int | None``
    help: str
    example: Any  # a valid value (form placeholders; the providers' round-trip tests)
    secret: bool

    @property
    def json_types(self) -> list[str]:
        """The JSON-schema types the option accepts (``"null"`` last)."""
        found: list[str] = []
        for member in _members(self.annotation):
            kind = _JSON_TYPES.get(get_origin(member) or member, "string")
            if kind not in found:
                found.append(kind)
        return [*found, "null"]

    def json_schema(self) -> dict[str, Any]:
        """A JSON schema of the option (Airflow's connection form renders from it)."""
        schema: dict[str, Any] = {"type": self.json_types}
        for member in _members(self.annotation):
            if get_origin(member) is list:
                item = _JSON_TYPES.get(get_origin(get_args(member)[0]) or get_args(member)[0])
                if item is not None:
                    schema["items"] = {"type": item}
        if self.secret:
            schema["format"] = "password"
        return schema

    def parse(self, value: Any) -> Any:
        """``value`` typed: a form that saved text (``"3"``, ``"true"``, ``'["a"]'``) gives
        the option's type; a value already typed, or text for a text option, is unchanged."""
        if not isinstance(value, str):
            return value
        if "string" not in self.json_types:
            return _parse_env(self.name, value, self.annotation)
        containers = {"array", "object"} & set(self.json_types)
        if containers and value.lstrip().startswith(("[", "{")):  # JSON, not a path or a name
            try:
                return json.loads(value)
            except ValueError as exc:
                raise ConfigError(f"Cannot parse {self.name}={value!r} as JSON: {exc}") from None
        return value


def _members(annotation: Any) -> list[Any]:
    if get_origin(annotation) in (Union, types.UnionType):
        return [a for a in get_args(annotation) if a is not type(None)]
    return [annotation]


@cache
def target_options() -> tuple[TargetOption, ...]:
    """Every ``Target`` option, in declaration order."""
    hints = get_type_hints(Target)
    options = []
    for f in dataclasses.fields(Target):
        help_text, example = _DESCRIBED.get(f.name, ("", None))
        options.append(
            TargetOption(
                name=f.name,
                annotation=hints[f.name],
                help=f.metadata.get("help", help_text) or f.name.replace("_", " ").capitalize(),
                example=f.metadata.get("example", example),
                secret=f.name in SECRET_FIELDS or not f.repr,
            )
        )
    return tuple(options)
