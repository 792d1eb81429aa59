"""KineticConfig: a Prefect block holding a Kinetic target (where jobs run, where state lives).

Save one per environment (``KineticConfig(backend="gke", ...).save("nightly-gke")``) and
name it in ``@kinetic_task(config="nightly-gke")``. Register the type with
``prefect block register -m kinetic_prefect``. Every option of the Target is a field (made
from ``kinetic_core.target_options()``; the secrets have secret fields, see
``HANDLED_APART``), so a worker running in a pod needs no ``KINETIC_*`` environment variables.
"""

from __future__ import annotations

from typing import Any, ClassVar

from prefect.blocks.core import Block
from pydantic import Field, SecretStr

import kinetic_core as kc

DOCUMENTATION_URL = "https://kinetic-workflows.github.io/kinetic-workflows/prefect/"
LOGO_URL = (
    "https://raw.githubusercontent.com/kinetic-workflows/kinetic-workflows/main/"
    "docs/assets/kinetic-logo.svg"
)


#: Target options that are not a plain field of the block, and where each goes instead.
#: Secrets are saved only in a secret field; every other option is a field of its own.
HANDLED_APART: dict[str, str] = {
    "signing_key": "signing_key (a secret field)",
    "kubeconfig": "kubeconfig (a path) or kubeconfig_content (the YAML, a secret field)",
}


def _add_target_fields(namespace: dict[str, Any]) -> None:
    """Declare a block field for every Target option not handled apart, in the class body
    being built (``namespace``): its type and help text are the core's, so an option added
    to ``Target`` is a block field without an edit here."""
    annotations = namespace.setdefault("__annotations__", {})
    for option in kc.target_options():
        if option.name not in HANDLED_APART:
            annotations[option.name] = option.annotation
            namespace[option.name] = Field(default=None, description=option.help)


class KineticConfig(Block):
    """Where Kinetic jobs run and where their state lives; unset fields fall back to
    ``KINETIC_*`` environment variables, then the embedded defaults (local backend,
    ``file://~/.kinetic``)."""

    _block_type_name: ClassVar[str] = "Kinetic Config"
    _block_type_slug: ClassVar[str] = "kinetic-config"
    _logo_url: ClassVar[Any] = LOGO_URL
    _documentation_url: ClassVar[Any] = DOCUMENTATION_URL
    _description: ClassVar[str] = (
        "Target for Kinetic jobs: backend (local, kubernetes, gke, slurm), storage URI, "
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

    # Every plain Target option is a field of the same name, type and help text, from
    # ``kinetic_core.target_options()``; the secret ones are declared after, kept secret.
    _add_target_fields(locals())
    kubeconfig: str | None = Field(
        default=None,
        description="Path of a kubeconfig file (default: $KUBECONFIG, ~/.kube/config).",
    )
    kubeconfig_content: SecretStr | None = Field(
        default=None,
        description="A kubeconfig's YAML, kept secret: held in memory, never written to a "
        "file, a handle or a log (instead of kubeconfig, not with it).",
    )
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
    o.name
    for o in kc.target_options()
    if o.name in KineticConfig.model_fields and o.name != "signing_key"
)
