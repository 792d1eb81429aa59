"""Does the job's environment match its submitter? Checked by the runner before it unpickles.

The submitter records its Python minor, cloudpickle and kinetic-workflows versions in the
call envelope's header (``payload.dump_envelope``). A runner in an image with other
versions may fail to unpickle, or worse, unpickle into subtly different code; so it ends
the job with reason ``ImageMismatch`` (``errors.ImageMismatch``) naming each version, and
runs nothing. A failed ``requirements=`` install at pod start (``bootstrap.py``) ends the
job here too, as ``RequirementsFailed``, so that every setup failure is decided by the
runner once, behind its start fence.
"""

from __future__ import annotations

import os
from typing import Any

import cloudpickle

from kinetic_core.errors import ImageMismatch, JobSetupError, RequirementsFailed
from kinetic_core.records.envelope import python_version
from kinetic_core.runtime.bootstrap import FAILURE_ENV
from kinetic_core.states import Reason
from kinetic_core.util import version

#: header key -> what a person calls it
_NAMES = {"python": "Python", "cloudpickle": "cloudpickle", "kinetic": "kinetic-workflows"}


def runner_versions() -> dict[str, str]:
    """This process's versions, keyed as the envelope header records them."""
    return {
        "python": python_version(),
        "cloudpickle": cloudpickle.__version__,
        "kinetic": version.__version__,
    }


def mismatches(recorded: dict[str, Any]) -> list[str]:
    """``"cloudpickle 3.1.2 (submitter) vs 3.0.0 (runner)"`` per differing version; a
    version the submitter did not record (an older envelope) is not compared."""
    ours = runner_versions()
    return [
        f"{_NAMES[key]} {recorded[key]} (submitter) vs {ours[key]} (runner)"
        for key in _NAMES
        if recorded.get(key) and recorded[key] != ours[key]
    ]


def mismatch_message(differences: list[str]) -> str:
    """What differs and what to do about it."""
    packages = [d for d in differences if not d.startswith("Python ")]
    fixes = [
        "rebuild the runner image from the project's Dockerfile with the submitter's "
        "versions (docker build --build-arg PYTHON_VERSION=<minor> "
        "--build-arg CLOUDPICKLE_VERSION=<version> -t REGISTRY/kinetic-runner:TAG . && "
        "docker push REGISTRY/kinetic-runner:TAG; then image='REGISTRY/kinetic-runner:TAG')"
    ]
    if packages and len(packages) == len(differences):
        pins = ", ".join(repr("{}=={}".format(*d.split()[:2])) for d in packages)
        fixes.append(f"set Target(requirements=[{pins}]) to install them at pod start")
    return (
        "The job's runner image does not match its submitter: "
        + "; ".join(differences)
        + ". Nothing was unpickled and the function did not run. To fix: "
        + ", or ".join(fixes)
        + "."
    )


def check_setup() -> None:
    """Raise ``RequirementsFailed`` when the pod-start install failed; return when the job
    may go on to load its call (whose header ``check_header`` then checks)."""
    failure = os.environ.get(FAILURE_ENV)
    if failure:
        raise RequirementsFailed(failure)


def check_header(header: dict[str, Any]) -> None:
    """Raise ``ImageMismatch`` when this runner's versions differ from those the call's
    envelope header records. Given to ``payload.load_envelope`` as its ``check``: the
    header is read once per job start, and verified before it is trusted; nothing is
    unpickled before this returns."""
    differences = mismatches(header)
    if differences:
        raise ImageMismatch(mismatch_message(differences))


def reason_of(exc: BaseException) -> str:
    """The job's reason for a failure before or in its function. A plain str: it goes into
    the pickled result body, which a submitter of another version must be able to load
    (``errors`` spells its reasons as Reason's words: it imports nothing of kinetic)."""
    return exc.reason if isinstance(exc, JobSetupError) else Reason.ERROR.value
