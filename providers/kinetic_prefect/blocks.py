"""KineticConfig: a Prefect block holding a Kinetic target (where jobs run, where state lives).

Save one per environment (``KineticConfig(backend="gke", ...).save("nightly-gke")``) and
name it in ``@kinetic_task(config="nightly-gke")``. Register the type with
``prefect block register -m kinetic_prefect``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from prefect.blocks.core import Block
from pydantic import Field, SecretStr

import kinetic_core as kc


class KineticConfig(Block):
    """Where Kinetic jobs run and where their state lives; unset fields fall back to
    ``KINETIC_*`` environment variables, then the embedded defaults (local backend,
    ``file://~/.kinetic``)."""

    _block_type_name: ClassVar[str] = "Kinetic Config"
    _block_type_slug: ClassVar[str] = "kinetic-config"
    _description: ClassVar[str] = (
        "Target for Kinetic jobs: backend (local, kubernetes, gke), storage URI, "
        "Kubernetes namespace, image, accelerator defaults and the payload signing key."
    )

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
    kube_context: str | None = Field(default=None, description="kubeconfig context to use.")
    project: str | None = Field(default=None, description="Cloud project (GKE/GCS).")
    resources: dict[str, Any] | None = Field(default=None, description="Pod resources.")
    life_span: float | None = Field(default=None, description="Max seconds a job may run.")
    schedule_timeout: float | None = Field(
        default=None, description="Max seconds a job may stay pending."
    )
    poll_interval: float | None = Field(
        default=None, description="Steady-state seconds between status polls."
    )
    env: list[str] | None = Field(default=None, description="Env var names captured at submit.")
    tags: dict[str, str] | None = Field(default=None, description="Tags added to every job.")
    signing_key: SecretStr | None = Field(
        default=None, description="HMAC key that signs payloads and results (keep it secret)."
    )

    def to_target(self) -> kc.Target:
        """The block as a (not yet resolved) ``kinetic_core.Target``; raises ConfigError if invalid."""
        data: dict[str, Any] = {
            name: getattr(self, name)
            for name in (
                "backend",
                "storage",
                "namespace",
                "image",
                "accelerator",
                "spot",
                "service_account",
                "kube_context",
                "project",
                "resources",
                "life_span",
                "schedule_timeout",
                "poll_interval",
                "env",
                "tags",
            )
            if getattr(self, name) is not None
        }
        if self.signing_key is not None:
            data["signing_key"] = self.signing_key.get_secret_value()
        target = kc.Target.from_dict(data)
        target.validate()
        return target
