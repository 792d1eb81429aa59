"""Which worker am I: ``kc.worker()``, and the variables the ML frameworks read.

Every worker of a multi-host job (a TPU slice of several hosts, GPUs over several nodes)
runs the same function; it learns its place from ``kc.worker()``: ``index`` (0 is the
coordinator, whose return value is the job's result), ``count``, ``coordinator``
(``host:port``) and ``hostnames`` (every worker's, in index order). A single-host or local
job is worker 0 of 1, coordinator ``localhost``.

Where a worker reads that from (``Worker.from_env``), first found wins:

- kinetic's own ``KINETIC_WORKER_INDEX``, ``KINETIC_WORKER_COUNT``,
  ``KINETIC_WORKER_HOSTNAMES`` (comma-separated), ``KINETIC_COORDINATOR_ADDRESS``;
- the index of an Indexed Job / JobSet pod, ``JOB_COMPLETION_INDEX`` (set by Kubernetes);
- what GKE's TPU webhook injects into a multi-host slice's pods, ``TPU_WORKER_ID`` and
  ``TPU_WORKER_HOSTNAMES``.

``framework_env`` is the pure function that gives a worker the variables the frameworks
read, so their own zero-argument setup works (a launcher sets them before the function
runs, leaving any that GKE's webhook already set):

TPU (``accelerator="tpu"``)
    ``TPU_WORKER_ID`` (this worker's index) and ``TPU_WORKER_HOSTNAMES`` (every worker's
    DNS name, comma-separated, index order): what GKE's mutating webhook injects into the
    pods of an Indexed Job (a JobSet's, too) with a ``subdomain``, ``parallelism`` > 1 and a
    ``google.com/tpu`` request ("Run your workload on TPU slice nodes",
    https://cloud.google.com/kubernetes-engine/docs/how-to/tpus, read 2026-11-25). libtpu forms the
    slice from them, and JAX's ``GkeTpuCluster`` detects GKE by ``TPU_WORKER_HOSTNAMES`` and
    takes process id = ``TPU_WORKER_ID``, count = number of hostnames, coordinator =
    first hostname, port 8476, after waiting for that name to resolve
    (https://github.com/jax-ml/jax/blob/main/jax/_src/clusters/cloud_tpu_cluster.py), so
    ``jax.distributed.initialize()`` with no arguments works. ``JAX_COORDINATOR_ADDRESS`` is
    left unset on TPU: JAX would then skip that wait. ``MEGASCALE_COORDINATOR_ADDRESS``,
    ``MEGASCALE_NUM_SLICES`` and ``MEGASCALE_SLICE_ID`` describe multislice (several slices
    over the data-center network); one kinetic job is one slice, so none is set.
GPU / CPU
    ``JAX_COORDINATOR_ADDRESS`` (worker 0's ``host:port``), which
    ``jax.distributed.initialize`` reads (https://github.com/jax-ml/jax/blob/main/jax/_src/distributed.py).
    JAX has no variable for the process count and id; outside TPU and SLURM/MPI its cluster
    detection asks the Kubernetes API (``K8sCluster``, needing RBAC to list pods), so call
    ``jax.distributed.initialize(num_processes=w.count, process_id=w.index)`` with
    ``w = kc.worker()``.
PyTorch (every accelerator)
    ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``: read by
    ``torch.distributed.init_process_group(init_method="env://")`` (the default; see
    ``_env_rendezvous_handler`` in
    https://github.com/pytorch/pytorch/blob/main/torch/distributed/rendezvous.py).
    One process per host, so ``WORLD_SIZE`` = hosts, ``RANK`` = ``NODE_RANK`` = index and
    ``LOCAL_RANK`` = 0 (``LOCAL_RANK`` is read by code written for torchrun, ``NODE_RANK``
    by PyTorch Lightning's ``LightningEnvironment``). To run several processes per host,
    start torchrun from the function with ``--nnodes=w.count --node-rank=w.index
    --master-addr=...``.

The reading itself is ``worker_env.read_place``, which a job's runner calls before its
start without importing this module's dataclass. It is ``workers``, not ``worker``:
importing a submodule sets it as an attribute of the package, which would hide the
function ``kc.worker``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from kinetic_core.errors import ConfigError
from kinetic_core.util.worker_env import (
    COORDINATOR_VAR,
    COUNT_VAR,
    DEFAULT_COORDINATOR_PORT,
    HOSTNAMES_VAR,
    INDEX_VAR,
    check_workers,
    read_place,
)

__all__ = [
    "COORDINATOR_VAR",
    "COUNT_VAR",
    "DEFAULT_COORDINATOR_PORT",
    "HOSTNAMES_VAR",
    "INDEX_VAR",
    "Worker",
    "check_workers",
    "framework_env",
    "worker",
]


@dataclass(frozen=True)
class Worker:
    """This worker's place in its job (see the module docstring)."""

    index: int = 0
    count: int = 1
    coordinator: str = f"localhost:{DEFAULT_COORDINATOR_PORT}"
    hostnames: tuple[str, ...] = ("localhost",)

    @property
    def is_coordinator(self) -> bool:
        """Worker 0: the one whose return value is the job's result."""
        return self.index == 0

    @property
    def hostname(self) -> str:
        return self.hostnames[self.index]

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Worker:
        """The worker the environment describes; worker 0 of 1 when it names none."""
        return cls(*read_place(os.environ if environ is None else environ))


def worker() -> Worker:
    """This process's place in its job: ``kc.worker().index`` etc. (see ``Worker``)."""
    return Worker.from_env()


def framework_env(
    index: int,
    count: int,
    hostnames: Sequence[str],
    coordinator_port: int = DEFAULT_COORDINATOR_PORT,
    accelerator: Literal["tpu", "gpu", "cpu"] = "gpu",
) -> dict[str, str]:
    """The variables worker ``index`` of ``count`` gets so that ``kc.worker()``, JAX and
    PyTorch find their place without arguments (which framework reads what: module docstring)."""
    check_workers(index, count, hostnames)
    if accelerator not in ("tpu", "gpu", "cpu"):
        raise ConfigError(f"accelerator must be 'tpu', 'gpu' or 'cpu', got {accelerator!r}.")
    coordinator = f"{hostnames[0]}:{coordinator_port}"
    env = {
        INDEX_VAR: str(index),
        COUNT_VAR: str(count),
        HOSTNAMES_VAR: ",".join(hostnames),
        COORDINATOR_VAR: coordinator,
        "MASTER_ADDR": hostnames[0],
        "MASTER_PORT": str(coordinator_port),
        "WORLD_SIZE": str(count),
        "RANK": str(index),
        "NODE_RANK": str(index),
        "LOCAL_RANK": "0",
    }
    if accelerator == "tpu":
        env.update({"TPU_WORKER_ID": str(index), "TPU_WORKER_HOSTNAMES": ",".join(hostnames)})
    else:
        env["JAX_COORDINATOR_ADDRESS"] = coordinator
    return env
