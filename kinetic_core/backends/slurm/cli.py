"""Slurm's commands, run at one boundary: every failure becomes a KineticError here.

Transient failures (the controller unreachable or slow: ``slurmctld`` down, restarting,
overloaded) are retried with the one policy (``util/retrying.py``) and, when they outlast
it, raised as a transient ``BackendError``; a refused option is a ``ConfigError``, a
refused permission ``PermissionDenied``, anything else a non-transient ``BackendError``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping

from kinetic_core.errors import BackendError, ConfigError, PermissionDenied
from kinetic_core.util.retrying import transient_retry

#: Seconds a command may take: Slurm's clients give up on an unreachable controller after
#: its MessageTimeout (10 s by default) themselves.
COMMAND_TIMEOUT = 60.0
# What Slurm's clients print when the controller cannot answer now (22.05 wording).
TRANSIENT = (
    "unable to contact slurm controller",
    "socket timed out",
    "connection refused",
    "connection reset",
    "zero bytes were transmitted",
    "resource temporarily unavailable",
    "temporarily unable to accept job",
    "communication connection failure",
    "transport endpoint",
    "slurmctld is not responding",
    "insane message length",
    "protocol authentication error",  # munge briefly unavailable
)
REFUSED_OPTION = (
    "invalid partition",
    "invalid account",
    "invalid qos",
    "invalid generic resource",
    "invalid gres",
    "invalid feature",
    "invalid constraint",
    "requested node configuration is not available",
    "node count specification invalid",
    "memory required by task is not available",
    "invalid time limit",
    "requested time limit is invalid",
    "unrecognized option",
    "invalid option",
    "unrecognised option",
    "invalid --",
    "invalid job name",
    "more processors requested than permitted",
)
#: sbatch's words when no node fits the job: a refused shape, unless the controller has
#: just (re)started and its nodes have not registered yet (they read UNKNOWN for seconds).
NO_NODE_FITS = "requested node configuration is not available"
DENIED = ("access/permission denied", "permission denied", "user's group not permitted")


def transient(exc: BaseException) -> bool:
    return isinstance(exc, BackendError) and exc.transient


def classify(command: str, stderr: str) -> Exception:
    """The KineticError for a failed Slurm command from what it printed."""
    said = stderr.strip().splitlines()[-1] if stderr.strip() else "(it printed nothing)"
    lower = stderr.lower()
    if any(word in lower for word in TRANSIENT):
        return BackendError(
            f"Slurm did not answer {command}: {said}. slurmctld is down, restarting or "
            "overloaded; the job is unaffected: try again.",
            transient=True,
        )
    if any(word in lower for word in DENIED):
        return PermissionDenied(
            f"Slurm refused {command}: {said}. Ask the cluster's admin for access (an "
            "account, partition or qos your user may use).",
            verb=command,
        )
    if any(word in lower for word in REFUSED_OPTION):
        return ConfigError(
            f"Slurm refused the job's options ({command}): {said}. Fix the target's "
            "partition/account/qos/cpus/memory/gpus/constraint/num_hosts/life_span or "
            "sbatch_args (`sinfo` lists partitions and nodes); nothing was submitted."
        )
    return BackendError(f"Slurm command {command} failed: {said}")


def run(
    argv: list[str],
    *,
    stdin: str | None = None,
    env: Mapping[str, str] | None = None,
    retry: bool = True,
) -> str:
    """Run a Slurm client command; its stdout. Retries transient failures unless ``retry``
    is False (a submit: whether a failed one took effect must be asked first)."""

    def once() -> str:
        try:
            proc = subprocess.run(
                argv,
                input=stdin,
                capture_output=True,
                text=True,
                env=dict(env) if env is not None else None,
                timeout=COMMAND_TIMEOUT,
            )
        except FileNotFoundError:
            raise ConfigError(
                f"Slurm's {argv[0]} is not installed on this machine (PATH={os.environ.get('PATH')}"
                "): run kinetic where Slurm's client commands are (a login node), or pick "
                "another backend."
            ) from None
        except subprocess.TimeoutExpired:
            raise BackendError(
                f"Slurm's {argv[0]} did not finish within {COMMAND_TIMEOUT:g}s (slurmctld "
                "overloaded?); try again.",
                transient=True,
            ) from None
        if proc.returncode:
            said = proc.stderr or proc.stdout
            if NO_NODE_FITS in said.lower() and _nodes_registering(env):
                raise BackendError(
                    f"Slurm cannot place the job yet ({argv[0]}): its nodes have not "
                    "registered with slurmctld since it (re)started; try again.",
                    transient=True,
                )
            raise classify(argv[0], said)
        return proc.stdout

    if not retry:
        return once()
    result: str = transient_retry(transient).copy()(once)
    return result


def _nodes_registering(env: Mapping[str, str] | None) -> bool:
    """Does a node of the cluster read UNKNOWN (``unk``: not registered since slurmctld
    started)? Then "no node fits" is the restart's, not the job's. False when ``sinfo``
    cannot say."""
    try:
        proc = subprocess.run(
            ["sinfo", "-h", "-o", "%t"],
            capture_output=True,
            text=True,
            env=dict(env) if env is not None else None,
            timeout=COMMAND_TIMEOUT,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and any(s.startswith("unk") for s in proc.stdout.split())
