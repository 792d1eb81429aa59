"""The runner image on the test cluster: a runner with another cloudpickle version ends the
job as ``ImageMismatch`` before unpickling; ``requirements=`` installs packages with uv at
pod start (from the package index this machine reaches), and a requirement that cannot be
installed ends the job as ``RequirementsFailed`` with uv's output in the log.

The node agent runs an image's pods with the interpreter its ``images.json`` names (see
cluster/README.md): here a venv made with uv with another cloudpickle and kinetic on its
path, as an image built with other versions would be.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import cloudpickle
import pytest
from cluster.cluster import TestCluster

import kinetic_core as kc
from kinetic_core.backends.kubernetes.image import CACHE_PATH

ROOT = Path(__file__).resolve().parents[2]
# Another release than the project's lock: the runner's own imports work with it.
OTHER_CLOUDPICKLE = "3.1.1" if cloudpickle.__version__ != "3.1.1" else "3.1.0"
OTHER_IMAGE = f"kinetic-test/runner-cloudpickle:{OTHER_CLOUDPICKLE}"
INDEX_ENV = (
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "UV_INDEX_URL",
    "UV_DEFAULT_INDEX",
    "HTTPS_PROXY",
    "PIP_CERT",
    "PIP_INDEX_URL",
    "PIP_FIND_LINKS",
)
ABSENT_PACKAGE = "kinetic-test-no-such-package-7f3a"


def _uv() -> str:
    """uv where the Makefile finds it: on PATH, with ~/.local/bin first."""
    found = shutil.which(
        "uv", path=f"{Path.home() / '.local' / 'bin'}{os.pathsep}{os.environ['PATH']}"
    )
    assert found, "uv is missing: run `make uv`"
    return found


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, text=True, timeout=300)


def _image(cluster: TestCluster, where: Path, name: str, cloudpickle_version: str) -> str:
    """An "image" ``name``: a venv (with pip, without uv) holding ``cloudpickle_version`` and
    this kinetic, registered with the node agent's image table."""
    venv = where / name.replace("/", "-").replace(":", "-")
    _run(_uv(), "venv", "--quiet", "--seed", "--python", "3.11", str(venv))
    python = venv / "bin" / "python"
    pin = f"cloudpickle=={cloudpickle_version}"
    # as the Dockerfile's image: kinetic with its `fast` extra (blake3), which the
    # submitters here have, so their envelopes are format 3
    _run(_uv(), "pip", "install", "--quiet", "--python", str(python), pin, "blake3")
    (venv / "lib" / "python3.11" / "site-packages" / "kinetic.pth").write_text(f"{ROOT}\n")
    assert cluster.dir is not None
    table_path = cluster.dir / "agent" / "images.json"
    table = json.loads(table_path.read_text()) if table_path.exists() else {}
    table_path.write_text(json.dumps({**table, name: str(python)}))
    return name


def _target(kube: kc.Target, path: str | None = None, **options: object) -> kc.Target:
    """``kube`` shipping this module's job bodies by value, with uv on the pods' PATH
    (unless ``path`` is the pods' PATH)."""
    uv_path = path or f"{Path(_uv()).parent}{os.pathsep}{os.environ['PATH']}"
    by_value = [*(kube.pickle_by_value or []), __name__]
    # how this machine reaches the package index (a TLS-inspecting proxy's CA, an index)
    index = {k: v for k, v in os.environ.items() if k in INDEX_ENV}
    env = {"PATH": uv_path, **index}
    return kube.merge({"pickle_by_value": by_value, "env": env, **options})


def imports_tabulate() -> str:
    import tabulate  # installed at pod start by requirements=

    return str(tabulate.tabulate([[1, 2]]))


def test_a_runner_with_another_cloudpickle_ends_the_job_as_image_mismatch(
    kube: kc.Target, k8s_cluster: TestCluster, tmp_path: Path
) -> None:
    """Before: the runner unpickled the payload with its own cloudpickle and ran the job."""
    image = _image(k8s_cluster, tmp_path, OTHER_IMAGE, OTHER_CLOUDPICKLE)
    job = kc.submit(imports_tabulate, target=_target(kube, image=image))
    state = job.wait(timeout=180)
    assert state.status is kc.JobStatus.FAILED, state
    assert state.reason == "ImageMismatch", state
    expected = f"cloudpickle {cloudpickle.__version__} (submitter) vs {OTHER_CLOUDPICKLE} (runner)"
    assert expected in (state.message or "")
    with pytest.raises(kc.ImageMismatch) as caught:
        job.result(timeout=60)
    assert expected in str(caught.value)
    assert f"requirements=['cloudpickle=={cloudpickle.__version__}']" in str(caught.value)


def test_requirements_are_installed_at_pod_start(kube: kc.Target) -> None:
    """Before: there was no requirements= option; the job's import failed in phase load."""
    job = kc.submit(imports_tabulate, target=_target(kube, requirements=["tabulate"]))
    assert "1  2" in job.result(timeout=300, cleanup=False)
    assert "installed ['tabulate']" in job.logs()


def test_a_requirement_that_cannot_be_installed_ends_the_job_as_requirements_failed(
    kube: kc.Target,
) -> None:
    job = kc.submit(imports_tabulate, target=_target(kube, requirements=[ABSENT_PACKAGE]))
    state = job.wait(timeout=300)
    assert state.status is kc.JobStatus.FAILED, state
    assert state.reason == "RequirementsFailed", state
    with pytest.raises(kc.RequirementsFailed) as caught:
        job.result(timeout=60, cleanup=False)
    assert ABSENT_PACKAGE in str(caught.value)
    assert ABSENT_PACKAGE in job.logs()  # uv's own output, whole, in the job's log


def test_an_environment_on_a_persistent_cache_is_made_once_and_reused(
    kube: kc.Target, tmp_path: Path
) -> None:
    """A hostPath (or PVC) mounted at the cache path replaces the emptyDir: the second pod
    finds the environment the first one made (keyed by the requirements), installs nothing."""
    cache = {CACHE_PATH: {"host_path": str(tmp_path / "env-cache")}}
    target = _target(kube, requirements=["tabulate"], volumes=cache, schedule_timeout=60)
    first = kc.submit(imports_tabulate, target=target)
    assert "1  2" in first.result(timeout=300, cleanup=False)
    assert "installed ['tabulate']" in first.logs()
    second = kc.submit(imports_tabulate, target=target)
    assert "1  2" in second.result(timeout=300, cleanup=False)
    assert "reusing" in second.logs() and "installed" not in second.logs()


def test_an_image_without_uv_gets_it_from_pip_once(
    kube: kc.Target, k8s_cluster: TestCluster, tmp_path: Path
) -> None:
    """The image lacks uv (and PATH has none): the bootstrap installs it into the cache with
    the image's pip, then installs the requirements with it."""
    image = _image(
        k8s_cluster, tmp_path, "kinetic-test/runner-without-uv:1", cloudpickle.__version__
    )
    target = _target(
        kube, "/usr/bin:/bin", image=image, requirements=["tabulate"], schedule_timeout=60
    )
    job = kc.submit(imports_tabulate, target=target)
    assert "1  2" in job.result(timeout=300, cleanup=False)
    assert "the image has no uv; installing it with pip" in job.logs()
