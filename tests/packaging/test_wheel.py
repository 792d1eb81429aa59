"""The release artifacts as a user gets them: the sdist's contents, and the wheel installed
with ``pip install kinetic-workflows[airflow]`` into a fresh virtualenv, run from a
temporary folder (never the source tree), showing the provider and running a smoke DAG.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
# What running the project leaves in a working tree: none of it may reach the sdist.
PLANTED = [
    "tests/__pycache__/conftest.cpython-311.pyc",
    "kinetic_core/__pycache__/jobs.cpython-311.pyc",
    ".venv-planted/bin/python",
    "tests/.pytest_cache/v/cache/lastfailed",
    ".mypy_cache/3.11/x.json",
    ".kinetic/jobs/k1/handle.json",
    ".airflow-home/airflow.db",
    "site/index.html",
    "dist/old.whl",
    "scratch/notes.txt",
    "build.log",
]
# The sdist's top level: sources, tests, docs, examples and the files that build them.
TOP_LEVEL = {
    "kinetic_core", "providers", "tests", "docs", "dags_examples", "bench", "README.md",
    "CHANGELOG.md", "LICENSE", "Makefile", "Dockerfile", "mkdocs.yml", "uv.lock",
    "pyproject.toml", "PKG-INFO", ".gitignore",
}  # fmt: skip
FORBIDDEN_PARTS = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".kinetic"}


def uv() -> str:
    found = shutil.which("uv") or shutil.which(str(Path.home() / ".local/bin/uv"))
    if found is None:
        pytest.fail("uv is not installed: run `make uv` (the Makefile installs it).")
    return found


def run(*cmd: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """sdist and wheel built (the wheel from the sdist) from a copy of the tree that has
    every kind of leftover planted in it."""
    work = tmp_path_factory.mktemp("build")
    src = work / "src"
    shutil.copytree(
        ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv*", "__pycache__", "site")
    )
    for rel in PLANTED:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text("leftover")
    out = work / "dist"
    run(uv(), "build", "--quiet", "--out-dir", out, src, cwd=work)
    yield out


def test_sdist_has_the_sources_and_no_leftovers(dist: Path) -> None:
    (sdist,) = dist.glob("kinetic_workflows-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = [n.split("/", 1)[1] for n in tar.getnames() if "/" in n]
    assert {n.split("/")[0] for n in names} == TOP_LEVEL
    assert "kinetic_core/jobs/handle.py" in names and "providers/kinetic_prefect/blocks.py" in names
    leftovers = [
        n
        for n in names
        if FORBIDDEN_PARTS & set(n.split("/"))
        or n.endswith(".pyc")
        or n.split("/")[0].startswith((".venv", ".airflow-home", "site", "dist"))
    ]
    assert leftovers == []


def test_wheel_metadata_for_a_release(dist: Path) -> None:
    (wheel,) = dist.glob("kinetic_workflows-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        listing = zf.read(name).decode()
    assert "Classifier: Framework :: Apache Airflow :: Provider" in listing
    assert "Project-URL: Documentation, https://" in listing
    assert "Project-URL: Changelog, https://" in listing
    assert "License-Expression: Apache-2.0" in listing


def test_wheel_installed_with_the_airflow_extra_runs_a_smoke_dag(
    dist: Path, tmp_path: Path
) -> None:
    (wheel,) = dist.glob("kinetic_workflows-*.whl")
    venv = tmp_path / "venv"
    run(uv(), "venv", "--quiet", "--python", "3.11", venv, cwd=tmp_path)
    python = venv / "bin/python"
    run(uv(), "pip", "install", "--quiet", "--python", python,
        f"kinetic-workflows[airflow] @ {wheel.as_uri()}", cwd=tmp_path)  # fmt: skip

    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(HERE / "smoke_dag.py", dags / "smoke_dag.py")
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "AIRFLOW", "KINETIC"))
    }
    env.update(
        AIRFLOW_HOME=str(tmp_path / "airflow-home"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_FOLDER=str(dags),
        KINETIC_STORAGE=f"file://{tmp_path}/kinetic",
        KINETIC_LOCAL_DIR=str(tmp_path / "local"),
        SMOKE_OUT=str(tmp_path / "smoke.out"),
    )
    where = run(python, "-c", "import kinetic_airflow; print(kinetic_airflow.__file__)",
                cwd=tmp_path, env=env)  # fmt: skip
    assert where.startswith(str(venv)), where  # the installed wheel, not the source tree

    airflow = venv / "bin/airflow"
    providers = json.loads(run(airflow, "providers", "list", "-o", "json", cwd=tmp_path, env=env))
    assert "kinetic-workflows" in {p["package_name"] for p in providers}
    hooks = json.loads(run(airflow, "providers", "hooks", "-o", "json", cwd=tmp_path, env=env))
    assert "kinetic" in {h["connection_type"] for h in hooks}

    run(airflow, "db", "migrate", cwd=tmp_path, env=env)
    run(airflow, "dags", "test", "kinetic_smoke", cwd=tmp_path, env=env)
    assert (tmp_path / "smoke.out").read_text() == "27"


LOWEST_PROBE = r"""
import sys
from pathlib import Path
import kinetic_core as kc
from kinetic_core.backends import get_backend

def square(x):
    return x * x

work = Path(sys.argv[1])
print(kc.submit(square, (7,), target=kc.Target(storage=(work / "store").as_uri()))
      .result(timeout=120))
(work / "kubeconfig").write_text(
    "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
    "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9', insecure-skip-tls-verify: true}}]\n"
    "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
)
target = kc.Target(backend="kubernetes", kubeconfig=str(work / "kubeconfig"),
                   namespace="default", storage=(work / "store").as_uri()).resolve()
try:
    get_backend(target).poll(["j-1"])
except kc.KineticError as exc:  # nothing listens on port 9: a transient backend error
    print(type(exc).__name__)
"""


def test_the_lowest_versions_the_wheel_allows_run_a_job_and_reach_the_kubernetes_api(
    dist: Path, tmp_path: Path
) -> None:
    """Each dependency of the core and the kubernetes and gcs extras pinned at the floor
    pyproject declares. kubernetes 29-36 lack ``ApiClient.param_serialize``, which the
    client uses: every request failed with an AttributeError, so the floor is 37."""
    (wheel,) = dist.glob("kinetic_workflows-*.whl")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [*project["dependencies"], *(project["optional-dependencies"][e] for e in
                ("kubernetes", "gcs"))]  # fmt: skip
    floors = [d.replace(">=", "==").split(",")[0] for d in _flatten(declared) if ">=" in d]
    (tmp_path / "floors.txt").write_text("\n".join(floors))
    venv = tmp_path / "venv"
    run(uv(), "venv", "--quiet", "--python", "3.11", venv, cwd=tmp_path)
    python = venv / "bin/python"
    run(uv(), "pip", "install", "--quiet", "--python", python, "--constraint", "floors.txt",
        f"kinetic-workflows[kubernetes,gcs] @ {wheel.as_uri()}", cwd=tmp_path)  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "KINETIC"))}
    env["KINETIC_LOCAL_DIR"] = str(tmp_path / "local")
    out = run(python, "-c", LOWEST_PROBE, tmp_path, cwd=tmp_path, env=env)
    assert out.split() == ["49", "BackendError"], out


def _flatten(items: list[str | list[str]]) -> list[str]:
    return [i for item in items for i in ([item] if isinstance(item, str) else item)]
