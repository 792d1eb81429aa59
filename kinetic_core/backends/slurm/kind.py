"""The slurm kind: its Target options and their check, job names, shape; no Slurm command.

Imported by every ``Target.validate``: standard library only until ``create``.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kinetic_core.backends import Backend, BackendKind, PlainKind, Shape, hosts_asked
from kinetic_core.errors import ConfigError
from kinetic_core.util import registry, signing

if TYPE_CHECKING:
    from kinetic_core.config.target import Target

#: Every Slurm job kinetic submits is named this plus the job id: launch finds a job whose
#: sbatch answer was lost by its name, and a poll picks its jobs out of one squeue.
NAME_PREFIX = "kinetic-"
SLURM_OPTIONS = frozenset(
    {
        "partition",
        "account",
        "qos",
        "cpus",
        "memory",
        "gpus",
        "constraint",
        "sbatch_args",
        "slurm_dir",
    }
)
#: sbatch flags kinetic sets itself (the job's name, files, shape, time, requeue policy):
#: an ``sbatch_args`` entry naming one would break finding, observing or recovering it.
OWNED_FLAGS = frozenset(
    {
        "--job-name",
        "--output",
        "--error",
        "--input",
        "--parsable",
        "--nodes",
        "--ntasks",
        "--ntasks-per-node",
        "--time",
        "--signal",
        "--requeue",
        "--no-requeue",
        "--export",
        "--export-file",
        "--chdir",
        "--wrap",
        "--array",
        "--wait",
        "--partition",
        "--account",
        "--qos",
        "--cpus-per-task",
        "--mem",
        "--gres",
        "--constraint",
        "--hold",
        "--test-only",
    }
)
_NAME = re.compile(r"^[A-Za-z0-9_.,-]+$")
_CONSTRAINT = re.compile(r"^[A-Za-z0-9_.,&|\[\]*:()!-]+$")
_MEMORY = re.compile(r"^[1-9][0-9]*[KMGT]?$")
_GPUS = re.compile(r"^([A-Za-z0-9_.-]+:)?[1-9][0-9]*$")


def job_name(job_id: str) -> str:
    """The Slurm job name of a kinetic job (``squeue --name``)."""
    return f"{NAME_PREFIX}{job_id}"


def default_slurm_dir(target: Target | Mapping[str, Any]) -> str:
    """Beside a file:// storage root (a shared filesystem: the usual Slurm setup); else one
    folder per storage URI under ~/.kinetic (a home folder is shared on most clusters)."""
    get = target.get if isinstance(target, Mapping) else lambda name: getattr(target, name)
    chosen, storage = get("slurm_dir"), get("storage") or ""
    if chosen:
        return os.path.expanduser(chosen)
    if storage.startswith("file://"):
        return os.path.join(storage[len("file://") :], "backend-slurm")
    digest = hashlib.sha256(storage.encode()).hexdigest()[:16]
    return os.path.expanduser(f"~/.kinetic/backend-slurm/{digest}")


def gpu_count(gpus: Any) -> int:
    """GPUs per node that ``gpus`` asks for (0: none or malformed)."""
    text = str(gpus) if isinstance(gpus, int | str) and not isinstance(gpus, bool) else ""
    count = text.rsplit(":", 1)[-1]
    return int(count) if count.isdigit() else 0


class SlurmKind(PlainKind):
    """Jobs are Slurm batch jobs named after their id; a job of ``num_hosts`` nodes is one
    allocation running one runner per node."""

    options = SLURM_OPTIONS
    supports_volumes = False
    #: A job may span several hosts (``num_hosts``): one Slurm allocation.
    multi_host = True

    def create(self, target: Target) -> Backend:
        module = registry.import_module(f"{__package__}.backend", "slurm backend")
        backend: Backend = module.SlurmBackend.from_target(target)
        return backend

    def cache_key(self, target: Target) -> tuple[object, ...]:
        """Per folder, storage, cluster (``SLURM_CONF`` now), signing key in force and
        lost_grace (the backend's poll applies it to a job Slurm forgot)."""
        return (
            default_slurm_dir(target),
            target.storage,
            os.environ.get("SLURM_CONF"),
            signing.key_in_force(target.signing_key),
            target.lost_grace,
        )

    def check_options(self, target: Target) -> None:
        check_slurm_options(target)

    def job_object_name(self, job_id: str) -> str | None:
        return job_name(job_id)

    def shape(self, target: Mapping[str, Any]) -> Shape:
        hosts = hosts_asked(target)
        return Shape(hosts=hosts, chips=gpu_count(target.get("gpus")) * hosts)


def check_slurm_options(target: Target) -> None:
    """Each Slurm option that is set, as plain data: ConfigError naming it and its shape."""
    for name in ("partition", "account", "qos"):
        value = getattr(target, name)
        if value is not None and not (isinstance(value, str) and _NAME.match(value)):
            raise ConfigError(
                f"{name} must be a Slurm {name} name (letters, digits, '_', '.', '-'; a "
                f"comma-separated list for partition), got {value!r}."
            )
    if target.constraint is not None and not (
        isinstance(target.constraint, str) and _CONSTRAINT.match(target.constraint)
    ):
        raise ConfigError(
            f"constraint must be a Slurm feature expression such as 'ib&h100' (no spaces), "
            f"got {target.constraint!r}."
        )
    cpus = target.cpus
    if cpus is not None and (not isinstance(cpus, int) or isinstance(cpus, bool) or cpus < 1):
        raise ConfigError(f"cpus must be a whole number >= 1 (CPUs per node), got {cpus!r}.")
    memory = target.memory
    if memory is not None and not (isinstance(memory, str) and _MEMORY.match(memory)):
        raise ConfigError(
            f"memory must be a Slurm size per node: a whole number with K, M, G or T "
            f"(e.g. '32G'; no unit: megabytes), got {memory!r}."
        )
    gpus = target.gpus
    if gpus is not None and not (
        (isinstance(gpus, int) and not isinstance(gpus, bool) and gpus >= 1)
        or (isinstance(gpus, str) and _GPUS.match(gpus))
    ):
        raise ConfigError(
            f"gpus must be a count >= 1 or type:count per node (e.g. 4 or 'a100:4'), got {gpus!r}."
        )
    check_sbatch_args(target.sbatch_args)
    slurm_dir = target.slurm_dir
    if slurm_dir is not None and not (
        isinstance(slurm_dir, str) and os.path.isabs(os.path.expanduser(slurm_dir))
    ):
        raise ConfigError(
            f"slurm_dir must be an absolute path on a filesystem every node shares, "
            f"got {slurm_dir!r}."
        )


def check_sbatch_args(args: Any) -> None:
    """Extra sbatch flags: a list of ``--name`` / ``--name=value`` strings, none of them a
    flag kinetic sets itself (a Target option says that: ``partition=``...)."""
    if args is None:
        return
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ConfigError(
            f"sbatch_args must be a list of sbatch flags such as ['--exclusive'], got {args!r}."
        )
    for arg in args:
        flag = arg.split("=", 1)[0]
        if not flag.startswith("--") or len(flag) < 3 or any(c.isspace() for c in flag):
            raise ConfigError(
                f"sbatch_args: {arg!r} is not a long sbatch flag: write each as --name or "
                "--name=value (e.g. '--reservation=maint'; short forms such as -p are refused)."
            )
        if flag in OWNED_FLAGS:
            raise ConfigError(
                f"sbatch_args: {flag} is set by kinetic itself (the job's name, files, shape, "
                "time limit and requeue policy); use the Target option instead (partition=, "
                "account=, qos=, cpus=, memory=, gpus=, constraint=, num_hosts=, life_span=)."
            )


KIND: BackendKind = SlurmKind()
