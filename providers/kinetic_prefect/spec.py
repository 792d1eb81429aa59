"""What a kinetic task runs remotely: the job spec and the checks on the function it ships."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import cloudpickle
from prefect import Task

import kinetic_core as kc
from kinetic_prefect.config import ConfigLike


@dataclasses.dataclass(frozen=True)
class JobSpec:
    """What a kinetic task submits, and how it waits."""

    fn: Callable[..., Any]
    config: ConfigLike
    overrides: kc.Target
    cancel_on_cancel: bool
    log_interval: float
    job_name: str
    job_tags: dict[str, str]
    keep_result: bool
    log_worker: int | None = 0  # a multi-host job's worker whose log is shown; None: all


def check_callable(fn: Any) -> None:
    """A plain function that can be pickled; SubmissionError/SerializationError otherwise."""
    if not callable(fn):
        raise kc.SubmissionError(
            f"kinetic_task needs a function to run remotely, got {type(fn).__name__}: {fn!r}."
        )
    if isinstance(fn, Task):
        raise kc.SubmissionError(
            f"{fn.name!r} is already a Prefect task; apply @kinetic_task to the plain function."
        )
    try:
        cloudpickle.dumps(fn)
    except Exception as exc:
        raise kc.SerializationError(
            f"Cannot serialize {getattr(fn, '__qualname__', fn)!r} to run it remotely: "
            f"{type(exc).__name__}: {exc}. Define it at module level and avoid capturing "
            "locks, sockets, clients or open files in its closure."
        ) from exc
