"""``python -m kinetic_core.runtime.bootstrap -m kinetic_core.runtime.runner …``: install ``requirements=`` at
pod start, then run the runner in the environment that has them.

The requirements go into a virtual environment layered over the image's interpreter (the
image's packages stay importable; the requirements win over them), made under a cache
folder and keyed by a hash of the requirements and the interpreter: a pod that finds the
environment ready reuses it, so only the first pod on a persistent cache (a PVC or a
hostPath mounted there) pays for the install. uv installs: the image's, or one installed
once into the cache with pip when the image lacks it. A failed install does not end the
pod here: the runner starts all the same with the failure in ``FAILURE_ENV`` and ends the
job as ``RequirementsFailed`` behind its start fence (``versions.check_setup``), so a
setup failure is decided once, like any other. Imports stay small (the runner reads
``FAILURE_ENV`` from here): the standard library, ``subprocess`` and ``fcntl`` only when
installing (and ``errors``, which imports nothing).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import site
import sys

from kinetic_core.errors import KineticError  # imports nothing itself

# shutil and pathlib are imported where an install uses them: every job's runner imports
# this module for ``replay()`` alone.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

#: JSON list of requirements (pip syntax); set by the Kubernetes manifest.
REQUIREMENTS_ENV = "KINETIC_BOOTSTRAP_REQUIREMENTS"
#: The cache folder (a volume); environments and uv's download cache live there.
CACHE_ENV = "KINETIC_BOOTSTRAP_CACHE"
#: Set for the runner when the install failed: the message of ``RequirementsFailed``.
FAILURE_ENV = "KINETIC_BOOTSTRAP_FAILURE"
#: Set for the runner: a file with what the install printed, replayed into the job's log
#: once the runner's capture began (the capture starts behind the runner's start fence, so
#: without the replay the install's output would stay in the pod's log and die with it).
LOG_ENV = "KINETIC_BOOTSTRAP_LOG"
DEFAULT_CACHE = "/var/cache/kinetic"
READY = ".kinetic-ready"
_TAIL_LINES = 20


class InstallFailed(KineticError):
    """The requirements could not be installed; the message says why and what to do."""


def env_key(requirements: list[str]) -> str:
    """Names the environment: same requirements on the same interpreter, same folder."""
    spec = json.dumps([sys.executable, sys.version, sorted(requirements)])
    return hashlib.sha256(spec.encode()).hexdigest()[:16]


def prepare(requirements: list[str], cache: str) -> str:
    """The interpreter of a ready environment with ``requirements`` (made unless another
    pod made it already; pods sharing the cache take turns on a lock)."""
    import shutil
    from pathlib import Path

    root = Path(cache) / f"env-{env_key(requirements)}"
    python = str(root / "bin" / "python")
    if (root / READY).exists():
        _say(f"kinetic bootstrap: reusing {root} for {requirements}\n")
        return python
    root.parent.mkdir(parents=True, exist_ok=True)
    with _locked(root.parent / f"{root.name}.lock"):
        if (root / READY).exists():
            return python
        shutil.rmtree(root, ignore_errors=True)  # a half-made one: its pod was killed
        uv = find_uv(Path(cache))
        _run([uv, "venv", "--quiet", "--system-site-packages", "--python", sys.executable, root])
        _layer_over_image(root)
        _run([uv, "pip", "install", "--python", python, *requirements])
        (root / READY).write_text(json.dumps(requirements))
    _say(f"kinetic bootstrap: installed {requirements} into {root}\n")
    return python


def find_uv(cache: Path) -> str:
    """uv from the image, or installed once into the cache with the image's pip."""
    import shutil

    found = shutil.which("uv") or shutil.which("uv", path=str(cache / "uv" / "bin"))
    if found:
        return found
    _say("kinetic bootstrap: the image has no uv; installing it with pip\n")
    try:
        _run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(cache / "uv"), "uv"]
        )
    except InstallFailed as exc:
        raise InstallFailed(
            f"{exc} The image has no uv and pip could not install it: add uv to the image "
            "(the project's Dockerfile does)."
        ) from None
    return str(cache / "uv" / "bin" / "uv")


def _layer_over_image(root: Path) -> None:
    """Make the image interpreter's own site folders (a venv's too, which
    ``--system-site-packages`` does not reach) importable after the environment's."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    own = root / "lib" / version / "site-packages"
    lines = [f"import site; site.addsitedir({d!r})" for d in site.getsitepackages()]
    (own / "_kinetic_image.pth").write_text("\n".join(lines) + "\n")


def _run(argv: list[str | Path]) -> None:
    """Run an install step, its output copied to the job's log; InstallFailed with its tail."""
    import subprocess

    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = proc.stdout.decode(errors="replace")
    _say(output)
    if proc.returncode != 0:
        tail = "\n".join(output.strip().splitlines()[-_TAIL_LINES:])
        raise InstallFailed(
            f"`{' '.join(map(str, argv[:3]))} …` failed (exit {proc.returncode}):\n{tail}\n"
        )


def _say(text: str) -> None:
    """To the pod's log now, and to the file the runner replays into the job's log."""
    sys.stderr.write(text)
    sys.stderr.flush()
    path = os.environ.get(LOG_ENV)
    if path:
        with contextlib.suppress(OSError), open(path, "a") as fh:
            fh.write(text)


def replay() -> None:
    """In the runner, once its capture began: the install's output into the job's log."""
    path = os.environ.pop(LOG_ENV, None)
    if not path:
        return
    with contextlib.suppress(OSError):
        with open(path) as fh:
            sys.stderr.write(fh.read())
        sys.stderr.flush()
        os.unlink(path)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    import fcntl

    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def main(argv: list[str]) -> None:
    """Exec ``python argv`` in the environment with the requirements (or, when they could
    not be installed, in the image's, told why)."""
    requirements = json.loads(os.environ.get(REQUIREMENTS_ENV) or "[]")
    cache = os.environ.get(CACHE_ENV) or DEFAULT_CACHE
    os.environ.setdefault("UV_CACHE_DIR", os.path.join(cache, "uv-cache"))
    if requirements:
        import tempfile

        os.environ[LOG_ENV] = os.path.join(
            tempfile.gettempdir(), f"kinetic-setup-{os.getpid()}.log"
        )
    try:
        python = prepare(requirements, cache) if requirements else sys.executable
    except (InstallFailed, OSError) as exc:
        os.environ[FAILURE_ENV] = (
            f"Installing requirements {requirements} at pod start failed: {exc}The whole "
            "installer output is in the job's log. Fix the requirement (name, version, the "
            "package index: UV_INDEX_URL in the target's env), or build them into the "
            "runner image (the project's Dockerfile) and drop requirements=."
        )
        python = sys.executable
    os.execv(python, [python, *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
