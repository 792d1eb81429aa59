"""The accelerator catalogue: a name like ``gpu-l4x4`` or ``tpu-v5e-8`` -> GKE node selector,
extended resources and tolerations."""

from __future__ import annotations

import re
from typing import Any

from kinetic_core.errors import ConfigError

GPU_KEY, TPU_KEY = "nvidia.com/gpu", "google.com/tpu"

# name -> (node selector, extended resources). TPU topologies follow GKE's podslice naming.
ACCELERATORS: dict[str, tuple[dict[str, str], dict[str, int]]] = {
    "cpu": ({}, {}),
    **{
        f"gpu-{short}": ({"cloud.google.com/gke-accelerator": gke}, {GPU_KEY: 1})
        for short, gke in {
            "t4": "nvidia-tesla-t4",
            "l4": "nvidia-l4",
            "a100": "nvidia-tesla-a100",
            "a100-80gb": "nvidia-a100-80gb",
            "h100": "nvidia-h100-80gb",
        }.items()
    },
    **{
        name: (
            {
                "cloud.google.com/gke-tpu-accelerator": kind,
                "cloud.google.com/gke-tpu-topology": topo,
            },
            {TPU_KEY: chips},
        )
        for name, kind, topo, chips in (
            ("tpu-v5e-1", "tpu-v5-lite-podslice", "1x1", 1),
            ("tpu-v5e-4", "tpu-v5-lite-podslice", "2x2", 4),
            ("tpu-v5e-8", "tpu-v5-lite-podslice", "2x4", 8),
            ("tpu-v5litepod-1", "tpu-v5-lite-podslice", "1x1", 1),
            ("tpu-v5litepod-4", "tpu-v5-lite-podslice", "2x2", 4),
            ("tpu-v5litepod-8", "tpu-v5-lite-podslice", "2x4", 8),
            ("tpu-v4-8", "tpu-v4-podslice", "2x2x1", 4),
            ("tpu-v6e-8", "tpu-v6e-slice", "2x4", 8),
        )
    },
}
_GPU_COUNT = re.compile(r"^(gpu-[a-z0-9-]+?)x(\d+)$")  # e.g. gpu-l4x4: four L4s


def accelerator_spec(
    name: str | None,
) -> tuple[dict[str, str], dict[str, int], list[dict[str, Any]]]:
    """Node selector, extended resources and tolerations for a catalogue accelerator."""
    if not name:
        return {}, {}, []
    count = 1
    match = _GPU_COUNT.match(name)
    if match and match.group(1) in ACCELERATORS:
        name, count = match.group(1), int(match.group(2))
    if name not in ACCELERATORS:
        raise ConfigError(
            f"Unknown accelerator {name!r}; choose one of {', '.join(sorted(ACCELERATORS))} "
            "(GPUs also as gpu-l4x4 for four), or set node_selector/resources yourself."
        )
    selector, resources = ACCELERATORS[name]
    resources = {k: v * count for k, v in resources.items()}
    tolerations = [{"key": k, "operator": "Exists", "effect": "NoSchedule"} for k in resources]
    return dict(selector), resources, tolerations
