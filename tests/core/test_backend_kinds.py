"""The backend seam: what differs between backends is the backend's kind to say.

Every registered name resolves to a ``BackendKind``; no core module outside
``kinetic_core/backends/`` compares a backend's name; ``kubernetes`` and ``gke`` behave the
same wherever the backend, not the name, decides.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kinetic_core as kc
from kinetic_core.backends import Backend, BackendKind
from kinetic_core.backends.kubernetes.image import DEFAULT_IMAGE
from kinetic_core.batch.driver import pod_credentials
from kinetic_core.data.inputs import Data, check_volumes
from kinetic_core.jobs.links import job_links
from kinetic_core.util import registry

CORE = Path(__file__).resolve().parents[2] / "kinetic_core"
NAMES = {"local", "kubernetes", "gke"}


def _spelled_names(node: ast.expr) -> set[str]:
    """Backend names spelled as string constants in ``node`` (itself, or a tuple/list/set)."""
    items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    return {i.value for i in items if isinstance(i, ast.Constant) and i.value in NAMES}


def name_comparisons(path: Path) -> list[str]:
    """``x == "local"``, ``x in ("kubernetes", "gke")``... in one module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                for name in sorted(_spelled_names(operand)):
                    found.append(f"{path.relative_to(CORE.parent)}:{node.lineno} {name!r}")
    return found


def test_no_core_module_outside_backends_compares_a_backend_name() -> None:
    offenders = [
        hit
        for path in sorted(CORE.rglob("*.py"))
        if "backends" not in path.relative_to(CORE).parts
        for hit in name_comparisons(path)
    ]
    assert not offenders, f"core modules branch on backend names: {offenders}"


@pytest.mark.parametrize("name", sorted(registry.BACKENDS))
def test_every_registered_name_resolves_to_a_kind_that_creates_its_backend(
    name: str, tmp_path: Path
) -> None:
    kind = registry.backend_kind(name)
    assert isinstance(kind, BackendKind)
    target = kc.Target(backend=name, storage=f"file://{tmp_path}").resolve(environ={})
    assert isinstance(kind.create(target), Backend)  # builds no API client yet
    assert kind.cache_key(target) == kind.cache_key(target)


def test_kubernetes_and_gke_are_one_kind_with_the_same_behaviour() -> None:
    kube, gke = registry.backend_kind("kubernetes"), registry.backend_kind("gke")
    job_id = "k1234abcd-1"
    target = {"namespace": "ml", "project": "proj", "kube_context": "gke_proj_europe-west4_c1"}
    in_pod = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    for env in (in_pod, {}):
        overlays = [pod_credentials({**target, "backend": b}, env) for b in ("kubernetes", "gke")]
        in_cluster = {"in_cluster": True, "image": DEFAULT_IMAGE}  # no image= in target
        assert overlays[0] == overlays[1] == (in_cluster if env else {})
    assert kube.job_object_name(job_id) == gke.job_object_name(job_id) == "kinetic-k1234abcd-1"
    links = kube.links(job_id, target)
    assert links == gke.links(job_id, target) and set(links) == {"job", "logs"}
    assert "/kubernetes/job/europe-west4/c1/ml/kinetic-k1234abcd-1/details" in links["job"]
    handles = [
        kc.JobHandle.from_dict(
            {"job_id": job_id, "storage": "gs://b/p", "target": {**target, "backend": b}}
        )
        for b in ("kubernetes", "gke")
    ]
    assert job_links(handles[0]) == job_links(handles[1])
    assert list(job_links(handles[0])) == ["job", "logs", "files"]
    assert handles[0].kubernetes_job_name == handles[1].kubernetes_job_name == links_name(links)


def links_name(links: dict[str, str]) -> str:
    return links["job"].split("/")[-2]


def test_the_local_kind_has_no_object_links_or_overlay_and_refuses_volumes(
    tmp_path: Path,
) -> None:
    local = registry.backend_kind("local")
    assert local.job_object_name("k1234abcd-1") is None
    assert local.links("k1234abcd-1", {"project": "proj"}) == {}
    assert local.driver_overlay({"backend": "local"}, {"KUBERNETES_SERVICE_HOST": "x"}) == {}
    assert not local.supports_volumes and registry.backend_kind("gke").supports_volumes
    with pytest.raises(kc.ConfigError, match="local backend cannot honour a mount path"):
        check_volumes(
            {"/data": Data(str(tmp_path))}, backend="local", supports_volumes=local.supports_volumes
        )
    gke = registry.backend_kind("gke")
    mounts = check_volumes(
        {"/data": Data(str(tmp_path))}, backend="gke", supports_volumes=gke.supports_volumes
    )
    assert set(mounts) == {"/data"}


@pytest.mark.parametrize("name", sorted(registry.BACKENDS))
@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("image_pull_policy", "Sometimes", "image_pull_policy must be one of"),
        ("secret_env", {"TOKEN": "no-key"}, "is not a Secret reference"),
        ("volumes", {"data": {"pvc": "claim"}}, "is relative"),
        ("kubeconfig", "  ", "kubeconfig is empty"),
    ],
)
def test_bad_pod_options_are_refused_whatever_the_backend(
    name: str, option: str, value: object, message: str, tmp_path: Path
) -> None:
    target = kc.Target.from_dict({"backend": name, "storage": f"file://{tmp_path}", option: value})
    with pytest.raises(kc.ConfigError, match=message):
        target.resolve(environ={})


def test_each_kind_owns_distinct_target_fields() -> None:
    kinds = {id(k): k for k in map(registry.backend_kind, registry.BACKENDS)}.values()
    owned = [field for kind in kinds for field in kind.options]
    assert len(owned) == len(set(owned))
    assert set(owned) <= set(kc.Target.__dataclass_fields__)
    assert "local_dir" in registry.backend_kind("local").options
    assert {"kubeconfig", "volumes", "namespace"} <= registry.backend_kind("gke").options
