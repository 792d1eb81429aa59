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
    assert "kinetic_core/jobs.py" in names and "providers/kinetic_prefect/blocks.py" in names
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
