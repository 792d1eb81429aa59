"""Which worker the environment names: the reading behind ``kc.worker()`` (``workers.py``,
where the sources are listed), without the ``Worker`` type.

Apart from ``workers.py`` because a job's runner reads its worker index before it writes
``started.json``, and ``Worker`` is a dataclass: ``dataclasses`` imports ``inspect`` and
``ast``, ~20 ms of a fresh interpreter here (``bench/runner_start.py``). Nothing but
``os`` and the errors is imported.
"""

from __future__ import annotations

from kinetic_core.errors import ConfigError

TYPE_CHECKING = False  # no `typing` at run time: a job's start path (runner.py)
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

#: JAX's fixed coordinator port on TPU (``cloud_tpu_cluster.coordinator_port``); also the
#: default for GPU jobs and PyTorch, so one address names the coordinator everywhere.
DEFAULT_COORDINATOR_PORT = 8476
INDEX_VAR = "KINETIC_WORKER_INDEX"
COUNT_VAR = "KINETIC_WORKER_COUNT"
HOSTNAMES_VAR = "KINETIC_WORKER_HOSTNAMES"
COORDINATOR_VAR = "KINETIC_COORDINATOR_ADDRESS"


def read_place(env: Mapping[str, str]) -> tuple[int, int, str, tuple[str, ...]]:
    """(index, count, coordinator, hostnames) as ``env`` names them, first source found
    winning; worker 0 of 1 on ``localhost`` when it names none. ConfigError when they
    contradict each other."""
    raw_hosts = _first(env, HOSTNAMES_VAR, "TPU_WORKER_HOSTNAMES")
    hostnames = tuple(h.strip() for h in raw_hosts.split(",")) if raw_hosts else None
    count_text = _first(env, COUNT_VAR)
    count = _whole(COUNT_VAR, count_text) if count_text else len(hostnames) if hostnames else 1
    index_var = next(
        (v for v in (INDEX_VAR, "JOB_COMPLETION_INDEX", "TPU_WORKER_ID") if env.get(v)), None
    )
    index = _whole(index_var, env[index_var]) if index_var else 0
    if hostnames is None:
        if count > 1:
            raise ConfigError(
                f"{COUNT_VAR}={count} but no {HOSTNAMES_VAR} (or TPU_WORKER_HOSTNAMES): "
                "a worker of a multi-host job needs every worker's hostname."
            )
        hostnames = ("localhost",)
    coordinator = _first(env, COORDINATOR_VAR) or f"{hostnames[0]}:{DEFAULT_COORDINATOR_PORT}"
    check_workers(index, count, hostnames)
    return index, count, coordinator, hostnames


def check_workers(index: int, count: int, hostnames: Sequence[str]) -> None:
    """ConfigError unless ``index`` is one of ``count`` workers, each with one hostname."""
    if count < 1 or not 0 <= index < count:
        raise ConfigError(f"worker index {index} is not one of {count} workers (0..{count - 1}).")
    if len(hostnames) != count or not all(hostnames):
        raise ConfigError(f"{count} workers need {count} hostnames, got {list(hostnames)!r}.")


def _first(env: Mapping[str, str], *names: str) -> str | None:
    return next((env[n] for n in names if env.get(n)), None)


def _whole(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"{name}={text!r} is not a whole number.") from None
