"""The accelerator catalogue against GKE's published TPU tables, and its refusals.

No cluster: the catalogue is plain data, and a multi-host shape is refused by
``Target.resolve`` (the Kubernetes kind's ``check_options``) before anything is written.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

import kinetic_core as kc
from kinetic_core.backends.kubernetes.accelerators import (
    ACCELERATORS,
    AcceleratorShape,
    accelerator_spec,
)

# Copied by hand from GKE's "Plan TPUs in GKE", section "Choose the TPU topology"
# (https://cloud.google.com/kubernetes-engine/docs/concepts/plan-tpus, read 2026-11-25):
# GKE accelerator label, topology, chips, VMs (= hosts, one pod each); the larger v4 and v5p
# shapes from the generation pages https://cloud.google.com/tpu/docs/v4 and .../v5p
# (v4/v5p names count TensorCores, 2 per chip; v5e/v6e names count chips).
# (names, gke-tpu-accelerator, gke-tpu-topology, chips, hosts)
GKE_TPU_TABLE: list[tuple[tuple[str, ...], str, str, int, int]] = [
    (("tpu-v4-8",), "tpu-v4-podslice", "2x2x1", 4, 1),
    (("tpu-v4-16",), "tpu-v4-podslice", "2x2x2", 8, 2),
    (("tpu-v4-32",), "tpu-v4-podslice", "2x2x4", 16, 4),
    (("tpu-v4-64",), "tpu-v4-podslice", "2x4x4", 32, 8),
    (("tpu-v4-128",), "tpu-v4-podslice", "4x4x4", 64, 16),
    (("tpu-v4-256",), "tpu-v4-podslice", "4x4x8", 128, 32),
    (("tpu-v4-512",), "tpu-v4-podslice", "4x8x8", 256, 64),
    (("tpu-v4-1024",), "tpu-v4-podslice", "8x8x8", 512, 128),
    (("tpu-v4-1536",), "tpu-v4-podslice", "8x8x12", 768, 192),
    (("tpu-v4-2048",), "tpu-v4-podslice", "8x8x16", 1024, 256),
    (("tpu-v4-4096",), "tpu-v4-podslice", "8x16x16", 2048, 512),
    (("tpu-v5e-1", "tpu-v5litepod-1"), "tpu-v5-lite-podslice", "1x1", 1, 1),
    (("tpu-v5e-4", "tpu-v5litepod-4"), "tpu-v5-lite-podslice", "2x2", 4, 1),
    (("tpu-v5e-8", "tpu-v5litepod-8"), "tpu-v5-lite-podslice", "2x4", 8, 1),
    (("tpu-v5e-16", "tpu-v5litepod-16"), "tpu-v5-lite-podslice", "4x4", 16, 4),
    (("tpu-v5e-32", "tpu-v5litepod-32"), "tpu-v5-lite-podslice", "4x8", 32, 8),
    (("tpu-v5e-64", "tpu-v5litepod-64"), "tpu-v5-lite-podslice", "8x8", 64, 16),
    (("tpu-v5e-128", "tpu-v5litepod-128"), "tpu-v5-lite-podslice", "8x16", 128, 32),
    (("tpu-v5e-256", "tpu-v5litepod-256"), "tpu-v5-lite-podslice", "16x16", 256, 64),
    (("tpu-v5p-8",), "tpu-v5p-slice", "2x2x1", 4, 1),
    (("tpu-v5p-16",), "tpu-v5p-slice", "2x2x2", 8, 2),
    (("tpu-v5p-32",), "tpu-v5p-slice", "2x2x4", 16, 4),
    (("tpu-v5p-64",), "tpu-v5p-slice", "2x4x4", 32, 8),
    (("tpu-v5p-128",), "tpu-v5p-slice", "4x4x4", 64, 16),
    (("tpu-v5p-256",), "tpu-v5p-slice", "4x4x8", 128, 32),
    (("tpu-v5p-512",), "tpu-v5p-slice", "4x8x8", 256, 64),
    (("tpu-v5p-1024",), "tpu-v5p-slice", "8x8x8", 512, 128),
    (("tpu-v5p-2048",), "tpu-v5p-slice", "8x8x16", 1024, 256),
    (("tpu-v5p-4096",), "tpu-v5p-slice", "8x16x16", 2048, 512),
    (("tpu-v5p-8192",), "tpu-v5p-slice", "16x16x16", 4096, 1024),
    (("tpu-v5p-12288",), "tpu-v5p-slice", "16x16x24", 6144, 1536),
    (("tpu-v6e-1",), "tpu-v6e-slice", "1x1", 1, 1),
    (("tpu-v6e-4",), "tpu-v6e-slice", "2x2", 4, 1),
    (("tpu-v6e-8",), "tpu-v6e-slice", "2x4", 8, 1),
    (("tpu-v6e-16",), "tpu-v6e-slice", "4x4", 16, 4),
    (("tpu-v6e-32",), "tpu-v6e-slice", "4x8", 32, 8),
    (("tpu-v6e-64",), "tpu-v6e-slice", "8x8", 64, 16),
    (("tpu-v6e-128",), "tpu-v6e-slice", "8x16", 128, 32),
    (("tpu-v6e-256",), "tpu-v6e-slice", "16x16", 256, 64),
]
TABLE_ROWS = [(name, *row[1:]) for row in GKE_TPU_TABLE for name in row[0]]
TPU_TOLERATION = [{"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.mark.parametrize(("name", "gke", "topology", "chips", "hosts"), TABLE_ROWS)
def test_every_gke_tpu_shape_is_in_the_catalogue(
    name: str, gke: str, topology: str, chips: int, hosts: int
) -> None:
    shape = accelerator_spec(name)
    assert shape == AcceleratorShape(
        name=name,
        kind="tpu",
        selector={
            "cloud.google.com/gke-tpu-accelerator": gke,
            "cloud.google.com/gke-tpu-topology": topology,
        },
        resources={"google.com/tpu": chips // hosts},
        tolerations=TPU_TOLERATION,
        hosts=hosts,
        chips_per_host=chips // hosts,
        topology=topology,
    )
    assert shape.chips == chips and shape.multi_host == (hosts > 1)


def test_the_catalogue_has_no_tpu_shape_beyond_the_table() -> None:
    catalogue = {name for name, shape in ACCELERATORS.items() if shape.kind == "tpu"}
    assert catalogue == {row[0] for row in TABLE_ROWS}


def test_issue_examples() -> None:
    v5e16 = accelerator_spec("tpu-v5e-16")
    assert (v5e16.hosts, v5e16.chips_per_host, v5e16.topology) == (4, 4, "4x4")
    v5e8 = accelerator_spec("tpu-v5e-8")  # single-host, as before the catalogue grew
    assert (v5e8.hosts, v5e8.resources, v5e8.topology) == (1, {"google.com/tpu": 8}, "2x4")
    assert accelerator_spec("tpu-v5litepod-16") == replace(v5e16, name="tpu-v5litepod-16")


def test_single_host_shapes_keep_their_pod_parts() -> None:
    """What the Job manifest gets for the shapes that existed before (unchanged)."""
    before = {
        "cpu": ({}, {}),
        "gpu-l4": ({"cloud.google.com/gke-accelerator": "nvidia-l4"}, {"nvidia.com/gpu": 1}),
        "gpu-h100": (
            {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
            {"nvidia.com/gpu": 1},
        ),
        "tpu-v4-8": (
            {
                "cloud.google.com/gke-tpu-accelerator": "tpu-v4-podslice",
                "cloud.google.com/gke-tpu-topology": "2x2x1",
            },
            {"google.com/tpu": 4},
        ),
    }
    for name, (selector, resources) in before.items():
        got_selector, got_resources, tolerations = accelerator_spec(name).pod_parts()
        assert (got_selector, got_resources) == (selector, resources), name
        assert [t["key"] for t in tolerations] == list(resources), name
    assert accelerator_spec(None).pod_parts() == ({}, {}, [])


def test_pod_parts_are_fresh_copies() -> None:
    selector, resources, tolerations = accelerator_spec("tpu-v5e-8").pod_parts()
    selector["cloud.google.com/gke-spot"] = "true"
    resources["cpu"] = 1
    tolerations.append({"key": "x"})
    again = accelerator_spec("tpu-v5e-8").pod_parts()
    assert again == (
        {
            "cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
            "cloud.google.com/gke-tpu-topology": "2x4",
        },
        {"google.com/tpu": 8},
        TPU_TOLERATION,
    )


def test_gpus_per_node_and_across_nodes() -> None:
    one = accelerator_spec("gpu-h100x8")
    assert (one.hosts, one.chips_per_host, one.resources) == (1, 8, {"nvidia.com/gpu": 8})
    two = accelerator_spec("gpu-h100x8", num_hosts=2)
    assert (two.hosts, two.chips, two.multi_host) == (2, 16, True)
    assert two.resources == {"nvidia.com/gpu": 8}  # per host
    assert accelerator_spec("cpu", num_hosts=3).hosts == 3


def test_unknown_accelerator_lists_the_catalogue_by_generation() -> None:
    with pytest.raises(kc.ConfigError) as info:
        accelerator_spec("tpu-v9-8")
    text = str(info.value)
    for group in (
        "TPU v4: tpu-v4-N",
        "TPU v5e: tpu-v5e-N or tpu-v5litepod-N",
        "TPU v5p",
        "TPU v6e",
    ):
        assert group in text
    assert "gpu-h100" in text and "num_hosts" in text and "node_selector" in text
    assert "tpu-v5e-16," not in text  # sizes per generation, not a wall of names


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("tpu-v5e-12", "GKE offers TPU v5e slices of 1, 4, 8, 16"),
        ("tpu-v6e-2", "TPU v6e slices of 1, 4, 8"),
        ("tpu-v4-4", "a 4-chip slice is tpu-v4-8"),
        ("tpu-v5p-4", "TensorCores (2 per chip) (a 4-chip slice is tpu-v5p-8)"),
        ("gpu-l4x0", "asks for 0 GPUs"),
        ("gpu-b9000", "Unknown accelerator 'gpu-b9000'"),
        ("tpu-v5e-16x2", "Unknown accelerator"),
    ],
)
def test_impossible_shapes(name: str, says: str) -> None:
    with pytest.raises(kc.ConfigError, match=re.escape(says)):
        accelerator_spec(name)


def test_a_tpu_slice_fixes_its_host_count() -> None:
    assert accelerator_spec("tpu-v5e-16", num_hosts=4).hosts == 4  # agreeing is fine
    with pytest.raises(kc.ConfigError, match=r"4 hosts x 4 chips.*num_hosts=2 contradicts"):
        accelerator_spec("tpu-v5e-16", num_hosts=2)
    with pytest.raises(kc.ConfigError, match="num_hosts=2 contradicts"):
        accelerator_spec("tpu-v5e-8", num_hosts=2)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_num_hosts_must_be_a_positive_whole_number(bad: object) -> None:
    with pytest.raises(kc.ConfigError, match="num_hosts must be a whole number >= 1"):
        kc.Target(backend="kubernetes", num_hosts=bad).resolve(environ={})  # type: ignore[arg-type]


def test_num_hosts_from_the_environment() -> None:
    target = kc.Target(backend="kubernetes", accelerator="gpu-h100x8").resolve(
        environ={"KINETIC_NUM_HOSTS": "1"}
    )
    assert target.num_hosts == 1 and kc.Target.from_json(target.to_json()).num_hosts == 1


@pytest.mark.parametrize(
    "options",
    [
        {"accelerator": "tpu-v5e-16"},
        {"accelerator": "tpu-v5p-16"},
        {"accelerator": "tpu-v6e-16"},
        {"accelerator": "gpu-h100x8", "num_hosts": 2},
        {"num_hosts": 2},
    ],
)
def test_a_multi_host_target_resolves_on_kubernetes(options: dict[str, object]) -> None:
    """A multi-host shape is a JobSet on Kubernetes (checked served at launch), no longer a
    ConfigError at resolve."""
    target = kc.Target(**{"backend": "kubernetes", **options}).resolve(environ={})  # type: ignore[arg-type]
    assert accelerator_spec(target.accelerator, target.num_hosts).hosts > 1


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"num_hosts": 2}, r"^2 hosts: the local backend runs a job as one process"),
        ({"accelerator": "tpu-v5e-16"}, r"^4 hosts: the local backend"),
    ],
)
def test_the_local_backend_refuses_a_multi_host_job(options: dict[str, object], says: str) -> None:
    """Never a silent single process: the local kind refuses at resolve, before a write."""
    with pytest.raises(kc.ConfigError, match=says) as info:
        kc.Target(**{"backend": "local", **options}).resolve(environ={})  # type: ignore[arg-type]
    assert "Kubernetes/GKE" in str(info.value)


def test_single_host_shapes_still_resolve() -> None:
    for name in ("tpu-v5e-8", "tpu-v5p-8", "tpu-v4-8", "tpu-v6e-8", "gpu-h100x8", "cpu"):
        target = kc.Target(backend="kubernetes", accelerator=name, num_hosts=1).resolve(environ={})
        assert target.accelerator == name


def test_an_unknown_accelerator_is_refused_at_resolve() -> None:
    with pytest.raises(kc.ConfigError, match="Unknown accelerator 'tpu-v9'"):
        kc.Target(backend="kubernetes", accelerator="tpu-v9").resolve(environ={})
