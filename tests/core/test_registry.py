"""The registry: every backend and storage scheme by name, loaded lazily, with clear errors."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import kinetic_core as kc
from kinetic_core.backends import Backend, BackendKind, PlainKind, get_backend
from kinetic_core.config import target as config
from kinetic_core.storage import open_storage
from kinetic_core.util import registry


class FakeBackend:
    """Stands for a backend added with one package and one registry line."""

    def __init__(self, target: kc.Target) -> None:
        self.target = target


class FakeKind(PlainKind):
    """The fake backend's kind: it owns ``local_dir`` (all else as a plain kind)."""

    options = frozenset({"local_dir"})


KIND = FakeKind(FakeBackend)


def test_importing_the_registry_imports_no_backend_and_no_client_library() -> None:
    """Resolving a target asks every backend's kind to check its options: the kinds and
    what they check with load, no backend module and no client library."""
    code = (
        "import sys, kinetic_core.util.registry, kinetic_core.config.target as c; "
        "c.Target(kubeconfig='a: 1\\n', volumes={'/d': {'pvc': 'c'}}).resolve(environ={}); "
        "print(sorted(m for m in sys.modules if m.startswith(('google', 'kubernetes', "
        "'urllib3', 'kinetic_core.backends', 'kinetic_core.storage'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(ast.literal_eval(out.stdout))
    kinds_and_checks = {
        "kinetic_core.backends",
        "kinetic_core.backends.local",
        "kinetic_core.backends.local.kind",
        "kinetic_core.backends.kubernetes",
        "kinetic_core.backends.kubernetes.accelerators",
        "kinetic_core.backends.kubernetes.console",
        "kinetic_core.config.kubeconfig",
        "kinetic_core.backends.kubernetes.image",
        "kinetic_core.backends.kubernetes.kind",
        "kinetic_core.backends.kubernetes.manifest",
        "kinetic_core.backends.kubernetes.pod_options",
        "kinetic_core.backends.kubernetes.pod_spec",
        "kinetic_core.backends.slurm",
        "kinetic_core.backends.slurm.kind",
    }
    assert "kinetic_core.backends.kubernetes.kind" in loaded
    assert loaded <= kinds_and_checks, loaded - kinds_and_checks


def test_config_validation_lists_come_from_the_registry() -> None:
    assert config.BACKENDS == tuple(registry.BACKENDS) == ("local", "kubernetes", "gke", "slurm")
    assert config.STORAGE_SCHEMES == ("file://", "gs://")


def test_unknown_names_are_config_errors_listing_the_valid_ones(tmp_path: Path) -> None:
    target = kc.Target(backend="pbs", storage=f"file://{tmp_path}")
    with pytest.raises(kc.ConfigError, match=r"Unknown backend 'pbs'; choose one of local, kube"):
        get_backend(target)
    with pytest.raises(
        kc.ConfigError, match=r"Unknown storage scheme 's3'; choose one of file, gs"
    ):
        registry.storage_factory("s3")
    with pytest.raises(
        kc.ConfigError, match=r"Unsupported storage URI 's3://b': use file:// or gs://"
    ):
        open_storage("s3://b")


def test_a_registry_line_is_all_a_new_backend_needs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(registry.BACKENDS, "fake", f"{__name__}:KIND")
    target = kc.Target(backend="fake", storage=f"file://{tmp_path}").resolve(environ={})
    backend: Any = get_backend(target)
    assert isinstance(backend, FakeBackend) and backend.target is target
    assert isinstance(registry.backend_kind("fake"), BackendKind)
    assert get_backend(target) is backend  # cached under the kind's key


def test_missing_gcs_extra_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "google.cloud.storage", None)  # type: ignore[arg-type]
    if "google.cloud" in sys.modules:  # else `from google.cloud import storage` finds it anyway
        monkeypatch.delattr(sys.modules["google.cloud"], "storage", raising=False)
    monkeypatch.delitem(sys.modules, "kinetic_core.storage.gcs", raising=False)
    with pytest.raises(kc.ConfigError, match=r"pip install 'kinetic-workflows\[gcs\]'"):
        open_storage("gs://no-extra-bucket/prefix")


def test_missing_kubernetes_extra_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "kubernetes", None)  # type: ignore[arg-type]
    for module in list(sys.modules):
        if module.startswith("kinetic_core.backends.kubernetes."):
            monkeypatch.delitem(sys.modules, module)
    target = kc.Target(backend="gke", storage=f"file://{tmp_path}", namespace="no-extra")
    with pytest.raises(kc.ConfigError, match=r"pip install 'kinetic-workflows\[kubernetes\]'"):
        get_backend(target)


def test_an_import_error_inside_kinetic_is_not_blamed_on_an_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(registry.STORAGE, "broken", "kinetic_core.no_such_module:Storage")
    with pytest.raises(ImportError, match="no_such_module"):
        registry.storage_factory("broken")


@pytest.mark.parametrize("name", sorted(registry.BACKENDS))
def test_every_registered_backend_implements_the_protocol(name: str, tmp_path: Path) -> None:
    """Including ``sleep_until_change``; ``discover`` is gone from the protocol."""
    target = kc.Target(backend=name, storage=f"file://{tmp_path}").resolve(environ={})
    backend = registry.backend_kind(name).create(target)  # builds no API client yet
    assert isinstance(backend, Backend)
    assert callable(backend.sleep_until_change)
    assert not hasattr(backend, "discover")
    backend.sleep_until_change([], 0.01)


def test_public_backend_names_and_kubernetes_job_name() -> None:
    assert kc.BACKENDS == config.BACKENDS
    data = {"job_id": "k1234abcd-1", "storage": "file:///tmp/x"}
    on_gke = kc.JobHandle.from_dict({**data, "target": {"backend": "gke"}})
    assert on_gke.kubernetes_job_name == "kinetic-k1234abcd-1"
    long = kc.JobHandle.from_dict(
        {**data, "job_id": "k" * 60 + "-1", "target": {"backend": "kubernetes"}}
    )
    assert long.kubernetes_job_name is not None and len(long.kubernetes_job_name) <= 63
    assert (
        kc.JobHandle.from_dict({**data, "target": {"backend": "local"}}).kubernetes_job_name is None
    )
