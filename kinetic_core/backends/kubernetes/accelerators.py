"""The accelerator catalogue: a name like ``gpu-l4x4`` or ``tpu-v5e-16`` -> the shape of the
hosts a job needs (GKE node selector, extended resources and tolerations per host, host count,
chips per host, TPU topology).

TPU slices follow GKE's published tables, read on 2026-11-25:

- https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus ("Choose the TPU
  topology": accelerator label, topology, chips, number of VMs = hosts, single- or multi-host)
- https://cloud.google.com/tpu/docs/v4, https://cloud.google.com/tpu/docs/v5e,
  https://cloud.google.com/tpu/docs/v5p, https://cloud.google.com/tpu/docs/v6e (the slice
  shapes of each generation and how its accelerator-type names count)

What the number in a name counts is Google's convention, not ours: **v4 and v5p names count
TensorCores** (two per chip: ``tpu-v4-8`` and ``tpu-v5p-8`` are 4 chips, topology 2x2x1);
**v5e and v6e names count chips** (one TensorCore each: ``tpu-v5e-16`` is 16 chips, 4x4).
On GKE a v4/v5p host (ct4p/ct5p-hightpu-4t) has 4 chips; a v5e/v6e slice of up to 8 chips
runs on one host (ct5lp-hightpu-1t/4t/8t, ct6e-standard-1t/4t/8t) and a larger one on hosts
of 4 chips each (ct5lp-hightpu-4t, ct6e-standard-4t): ``tpu-v5e-16`` is 4 hosts x 4 chips.
Cloud TPU's own pages count v5e/v6e hosts as 8-chip VMs; GKE's multi-host node pools use the
4-chip machine type, which is what a pod lands on, so the catalogue follows GKE.

GPUs: ``gpu-h100`` is one GPU, ``gpu-h100x8`` eight on one node; ``num_hosts`` (a Target
field) spreads a job over that many such nodes. A TPU shape fixes its own host count.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from kinetic_core.errors import ConfigError

GPU_KEY, TPU_KEY = "nvidia.com/gpu", "google.com/tpu"
GPU_SELECTOR = "cloud.google.com/gke-accelerator"
TPU_SELECTOR = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY_SELECTOR = "cloud.google.com/gke-tpu-topology"

AcceleratorKind = Literal["cpu", "gpu", "tpu"]


@dataclass(frozen=True)
class AcceleratorShape:
    """The hosts one job needs: every host (pod) gets ``selector``, ``resources`` and
    ``tolerations``; a job of ``hosts`` > 1 is a multi-host slice (one pod per host)."""

    name: str
    kind: AcceleratorKind = "cpu"
    selector: dict[str, str] = field(default_factory=dict)
    resources: dict[str, int] = field(default_factory=dict)  # extended resources per host
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    hosts: int = 1
    chips_per_host: int = 0
    topology: str | None = None

    @property
    def multi_host(self) -> bool:
        return self.hosts > 1

    @property
    def chips(self) -> int:
        """Accelerator chips (GPUs or TPU chips) over all hosts."""
        return self.hosts * self.chips_per_host

    def pod_parts(self) -> tuple[dict[str, str], dict[str, int], list[dict[str, Any]]]:
        """Fresh copies of one pod's node selector, extended resources and tolerations,
        for a caller that adds its own (spot, the Target's node_selector)."""
        return dict(self.selector), dict(self.resources), [dict(t) for t in self.tolerations]


@dataclass(frozen=True)
class TpuGeneration:
    """One TPU generation as GKE offers it (see the module docstring for the sources)."""

    label: str  # "v5e"
    gke_accelerator: str  # the cloud.google.com/gke-tpu-accelerator value
    spellings: tuple[str, ...]  # name prefixes: tpu-v5e-N, tpu-v5litepod-N
    cores_per_chip: int  # what N counts: 2 -> TensorCores (v4, v5p), 1 -> chips
    single_host_max_chips: int  # slices up to this size run on one host
    topologies: tuple[str, ...]

    def shape(self, name: str, topology: str) -> AcceleratorShape:
        chips = _chips(topology)
        per_host = chips if chips <= self.single_host_max_chips else MULTI_HOST_CHIPS
        return AcceleratorShape(
            name=name,
            kind="tpu",
            selector={TPU_SELECTOR: self.gke_accelerator, TOPOLOGY_SELECTOR: topology},
            resources={TPU_KEY: per_host},
            tolerations=[_toleration(TPU_KEY)],
            hosts=chips // per_host,
            chips_per_host=per_host,
            topology=topology,
        )

    def sizes(self) -> list[int]:
        """The N of every name of this generation, smallest first."""
        return [_chips(t) * self.cores_per_chip for t in self.topologies]


MULTI_HOST_CHIPS = 4  # chips per host of every multi-host GKE TPU node pool (…-4t machines)
_V4_V5P = ("2x2x1", "2x2x2", "2x2x4", "2x4x4", "4x4x4", "4x4x8", "4x8x8", "8x8x8")
_V5E_V6E = ("1x1", "2x2", "2x4", "4x4", "4x8", "8x8", "8x16", "16x16")
TPU_GENERATIONS = (
    TpuGeneration(
        "v4", "tpu-v4-podslice", ("tpu-v4",), 2, 4, (*_V4_V5P, "8x8x12", "8x8x16", "8x16x16")
    ),
    TpuGeneration("v5e", "tpu-v5-lite-podslice", ("tpu-v5e", "tpu-v5litepod"), 1, 8, _V5E_V6E),
    TpuGeneration(
        "v5p",
        "tpu-v5p-slice",
        ("tpu-v5p",),
        2,
        4,
        (*_V4_V5P, "8x8x16", "8x16x16", "16x16x16", "16x16x24"),
    ),
    TpuGeneration("v6e", "tpu-v6e-slice", ("tpu-v6e",), 1, 8, _V5E_V6E),
)
GPU_MODELS = {
    "t4": "nvidia-tesla-t4",
    "l4": "nvidia-l4",
    "a100": "nvidia-tesla-a100",
    "a100-80gb": "nvidia-a100-80gb",
    "h100": "nvidia-h100-80gb",
}


def _toleration(key: str) -> dict[str, Any]:
    return {"key": key, "operator": "Exists", "effect": "NoSchedule"}


def _chips(topology: str) -> int:
    return math.prod(int(d) for d in topology.split("x"))


def _gpu(short: str, gke: str, count: int = 1) -> AcceleratorShape:
    return AcceleratorShape(
        name=f"gpu-{short}" + (f"x{count}" if count > 1 else ""),
        kind="gpu",
        selector={GPU_SELECTOR: gke},
        resources={GPU_KEY: count},
        tolerations=[_toleration(GPU_KEY)],
        chips_per_host=count,
    )


def _catalogue() -> dict[str, AcceleratorShape]:
    shapes = {"cpu": AcceleratorShape(name="cpu")}
    shapes.update({f"gpu-{short}": _gpu(short, gke) for short, gke in GPU_MODELS.items()})
    for gen in TPU_GENERATIONS:
        for topology in gen.topologies:
            for prefix in gen.spellings:
                name = f"{prefix}-{_chips(topology) * gen.cores_per_chip}"
                shapes[name] = gen.shape(name, topology)
    return shapes


#: Every catalogue name (GPUs also take an ``xN`` count: ``gpu-l4x4``).
ACCELERATORS: dict[str, AcceleratorShape] = _catalogue()
_GPU_COUNT = re.compile(r"^gpu-([a-z0-9-]+?)x(\d+)$")  # e.g. gpu-l4x4: four L4s
_TPU_NAME = re.compile(r"^(tpu-[a-z0-9]+)-(\d+)$")


def accelerator_spec(name: str | None, num_hosts: int | None = None) -> AcceleratorShape:
    """The shape of ``name`` (``None``/empty: no accelerator), spread over ``num_hosts``
    hosts where the accelerator does not fix its own; ConfigError for an unknown or
    impossible shape, or a ``num_hosts`` that contradicts a TPU slice (``Target.validate``
    has checked that ``num_hosts`` is a whole number >= 1)."""
    shape = _lookup(name) if name else AcceleratorShape(name="")
    if shape.kind != "tpu":
        return replace(shape, hosts=num_hosts or 1)
    if num_hosts is not None and num_hosts != shape.hosts:
        raise ConfigError(
            f"accelerator {shape.name!r} is a TPU slice of {_hosts_text(shape)}: its host "
            f"count is fixed, so num_hosts={num_hosts} contradicts it. Leave num_hosts unset, "
            f"or pick the slice with the hosts you want ({_multi_host_examples(shape)})."
        )
    return shape


def _lookup(name: str) -> AcceleratorShape:
    if name in ACCELERATORS:
        return ACCELERATORS[name]
    match = _GPU_COUNT.match(name)
    if match and match.group(1) in GPU_MODELS:
        count = int(match.group(2))
        if count < 1:
            raise ConfigError(f"accelerator {name!r} asks for {count} GPUs: give 1 or more.")
        return _gpu(match.group(1), GPU_MODELS[match.group(1)], count)
    raise ConfigError(f"Unknown accelerator {name!r}{_size_hint(name)}. {catalogue_summary()}")


def _size_hint(name: str) -> str:
    """For a known TPU generation with an impossible size: that generation's sizes."""
    match = _TPU_NAME.match(name)
    gen = next((g for g in TPU_GENERATIONS if match and match.group(1) in g.spellings), None)
    if match is None or gen is None:
        return ""
    counted = "TensorCores (2 per chip)" if gen.cores_per_chip == 2 else "chips"
    hint = f": GKE offers TPU {gen.label} slices of {', '.join(map(str, gen.sizes()))} {counted}"
    doubled = f"{match.group(1)}-{int(match.group(2)) * gen.cores_per_chip}"
    if gen.cores_per_chip > 1 and doubled in ACCELERATORS:
        hint += f" (a {match.group(2)}-chip slice is {doubled})"
    return hint


def catalogue_summary() -> str:
    """The valid names, grouped by generation (what an error message lists)."""
    tpus = "; ".join(
        f"TPU {g.label}: {' or '.join(p + '-N' for p in g.spellings)} with N in "
        f"{', '.join(map(str, g.sizes()))} "
        f"({'TensorCores, 2 per chip' if g.cores_per_chip == 2 else 'chips'})"
        for g in TPU_GENERATIONS
    )
    return (
        f"Choose cpu; GPUs {', '.join('gpu-' + s for s in GPU_MODELS)} (N per node as "
        f"gpu-l4x4, over several nodes with num_hosts); {tpus}; "
        "or set node_selector/resources yourself."
    )


def _hosts_text(shape: AcceleratorShape) -> str:
    return (
        f"{shape.hosts} host{'s' if shape.hosts > 1 else ''} x {shape.chips_per_host} chips, "
        f"topology {shape.topology}"
    )


def _multi_host_examples(shape: AcceleratorShape) -> str:
    gen = next(g for g in TPU_GENERATIONS if shape.selector[TPU_SELECTOR] == g.gke_accelerator)
    prefix = gen.spellings[0]
    examples = [ACCELERATORS[f"{prefix}-{n}"] for n in gen.sizes()[:5]]
    return ", ".join(f"{s.name}: {s.hosts} host{'s' if s.hosts > 1 else ''}" for s in examples)


def describe(shape: AcceleratorShape) -> str:
    """``'tpu-v5e-16' (4 hosts x 4 chips, topology 4x4)`` or ``'gpu-h100x8' on 2 hosts``."""
    if shape.kind == "tpu":
        return f"{shape.name!r} ({_hosts_text(shape)})"
    return f"{shape.name!r} on {shape.hosts} hosts" if shape.name else f"{shape.hosts} hosts"
