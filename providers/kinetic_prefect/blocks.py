"""KineticConfig: a Prefect block holding a Kinetic target (where jobs run, where state lives).

Save one per environment (``KineticConfig(backend="gke", ...).save("nightly-gke")``) and
name it in ``@kinetic_task(config="nightly-gke")``. Register the type with
``prefect block register -m kinetic_prefect``. Every Kubernetes option of the Target is a
field, so a worker running in a pod needs no ``KINETIC_*`` environment variables.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from prefect.blocks.core import Block
from pydantic import Field, SecretStr

import kinetic_core as kc

DOCUMENTATION_URL = "https://kinetic-workflows.github.io/kinetic-workflows/prefect/"
LOGO_URL = (
    "https://raw.githubusercontent.com/kinetic-workflows/kinetic-workflows/main/"
    "docs/assets/kinetic-logo.svg"
)


class KineticConfig(Block):
    """Where Kinetic jobs run and where their state lives; unset fields fall back to
    ``KINETIC_*`` environment variables, then the embedded defaults (local backend,
    ``file://~/.kinetic``)."""

    _block_type_name: ClassVar[str] = "Kinetic Config"
    _block_type_slug: ClassVar[str] = "kinetic-config"
    _logo_url: ClassVar[Any] = LOGO_URL
    _documentation_url: ClassVar[Any] = DOCUMENTATION_URL
    _description: ClassVar[str] = (
        "Target for Kinetic jobs: backend (local, kubernetes, gke), storage URI, "
        "Kubernetes cluster access and pod options, accelerator defaults and the payload "
        "signing key."
    )
    _code_example: ClassVar[str] = """
```python
from kinetic_prefect import KineticConfig, kinetic_task

config = KineticConfig.load("BLOCK_NAME")   # or @kinetic_task(config="BLOCK_NAME")

@kinetic_task(config="BLOCK_NAME", accelerator="tpu-v5e-8")
def train(data_uri: str) -> dict: ...
```
"""

    backend: str | None = Field(default=None, description="local, kubernetes or gke.")
    storage: str | None = Field(
        default=None,
        description="Storage root: file:///abs/path, file://~/dir or gs://bucket/prefix.",
    )
    namespace: str | None = Field(default=None, description="Kubernetes namespace.")
    image: str | None = Field(default=None, description="Container image for Kubernetes jobs.")
    accelerator: str | None = Field(
        default=None, description="Default accelerator, e.g. tpu-v5e-8."
    )
    spot: bool | None = Field(default=None, description="Run on spot/preemptible capacity.")
    service_account: str | None = Field(default=None, description="Kubernetes service account.")
    in_cluster: bool | None = Field(
        default=None,
        description="Use the pod's service account (a worker running in the cluster) "
        "instead of a kubeconfig.",
    )
    kubeconfig: str | None = Field(
        default=None,
        description="Path of a kubeconfig file (default: $KUBECONFIG, ~/.kube/config).",
    )
    kubeconfig_content: SecretStr | None = Field(
        default=None,
        description="A kubeconfig's YAML, kept secret: held in memory, never written to a "
        "file, a handle or a log (instead of kubeconfig, not with it).",
    )
    kube_context: str | None = Field(default=None, description="kubeconfig context to use.")
    node_selector: dict[str, str] | None = Field(
        default=None, description="Node labels the job's pod must run on."
    )
    tolerations: list[dict[str, Any]] | None = Field(
        default=None, description="Pod tolerations, as in a pod spec."
    )
    labels: dict[str, str] | None = Field(default=None, description="Labels on the job's pod.")
    annotations: dict[str, str] | None = Field(
        default=None, description="Annotations on the job's pod."
    )
    project: str | None = Field(default=None, description="Cloud project (GKE/GCS).")
    resources: dict[str, Any] | None = Field(default=None, description="Pod resources.")
    life_span: float | None = Field(default=None, description="Max seconds a job may run.")
    schedule_timeout: float | None = Field(
        default=None, description="Max seconds a job may stay pending."
    )
    poll_interval: float | None = Field(
        default=None, description="Steady-state seconds between status polls."
    )
    env: list[str] | dict[str, str | None] | None = Field(
        default=None,
        description="Env vars: names or patterns (WANDB_*) captured at submit, or "
        '{"NAME": "literal value"}.',
    )
    secret_env: dict[str, str] | None = Field(
        default=None, description='Env vars from Secrets: {"NAME": "secret-name/key"}.'
    )
    env_from: list[dict[str, Any]] | None = Field(
        default=None,
        description='Whole Secrets/ConfigMaps as env: [{"secret": "name"}, {"config_map": "name"}].',
    )
    volumes: dict[str, dict[str, Any]] | None = Field(
        default=None,
        description='Mounts: {"/data": {"pvc": "claim"}, "/dev/shm": {"empty_dir": '
        '{"medium": "Memory", "size_limit": "16Gi"}}} (also secret, config_map, host_path).',
    )
    image_pull_policy: str | None = Field(
        default=None, description="Always, IfNotPresent or Never."
    )
    image_pull_secrets: list[str] | None = Field(
        default=None, description="Secrets holding registry credentials."
    )
    priority_class: str | None = Field(default=None, description="PriorityClass of the pod.")
    affinity: dict[str, Any] | None = Field(
        default=None, description="Pod affinity, as in a pod spec."
    )
    security_context: dict[str, Any] | None = Field(
        default=None, description="The pod's securityContext, as in a pod spec."
    )
    termination_grace_period: int | None = Field(
        default=None, description="Seconds between SIGTERM and SIGKILL."
    )
    ttl_after_finished: int | None = Field(
        default=None, description="Seconds a finished Job is kept (default 86400)."
    )
    active_deadline: float | None = Field(
        default=None, description="Seconds the cluster lets the Job run (default: life_span)."
    )
    pod_template: dict[str, Any] | str | None = Field(
        default=None,
        description="A pod spec (or the path of a YAML file) merged under the generated one: "
        "sidecars, init containers, DNS, host settings.",
    )
    pickle_by_value: list[str] | None = Field(
        default=None,
        description="Modules shipped with the function (by value) because the image lacks them.",
    )
    tags: dict[str, str] | None = Field(default=None, description="Tags added to every job.")
    signing_key: SecretStr | None = Field(
        default=None, description="HMAC key that signs payloads and results (keep it secret)."
    )

    def to_target(self) -> kc.Target:
        """The block as a (not yet resolved) ``kinetic_core.Target``; raises ConfigError if
        invalid. A ``kubeconfig_content`` travels as the Target's kubeconfig (the core keeps
        it in memory and serializes only a reference to it)."""
        data: dict[str, Any] = {
            name: getattr(self, name)
            for name in TARGET_OPTIONS
            if getattr(self, name, None) is not None
        }
        if self.signing_key is not None:
            data["signing_key"] = self.signing_key.get_secret_value()
        if self.kubeconfig_content is not None:
            if self.kubeconfig is not None:
                raise kc.ConfigError(
                    "Set either kubeconfig (a file path) or kubeconfig_content (the YAML) "
                    "in the KineticConfig block, not both."
                )
            data["kubeconfig"] = self.kubeconfig_content.get_secret_value()
        target = kc.Target.from_dict(data)
        target.validate()
        return target


#: Target options a block field carries as plain values (secrets are handled above).
TARGET_OPTIONS = tuple(
    f.name
    for f in dataclasses.fields(kc.Target)
    if f.name in KineticConfig.model_fields and f.name != "signing_key"
)
