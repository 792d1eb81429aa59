"""kinetic_core: submit a Python function as a detached job, observe it, collect it, reattach.

This module is the whole public API. Names load lazily so that ``python -m
kinetic_core.runner`` (inside every job) imports only what it uses.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not `from typing import ...`: importing typing costs the runner ~5 ms

_EXPORTS = {
    "run": "kinetic_core.jobs",
    "submit": "kinetic_core.jobs",
    "attach": "kinetic_core.jobs",
    "list_jobs": "kinetic_core.jobs",
    "JobHandle": "kinetic_core.jobs",
    "RemoteFunction": "kinetic_core.jobs",
    "JobStatus": "kinetic_core.status",
    "JobState": "kinetic_core.status",
    "resolve_states": "kinetic_core.status",
    "Target": "kinetic_core.config",
    "positive_seconds": "kinetic_core.config",
    "submit_map": "kinetic_core.batch",
    "attach_batch": "kinetic_core.batch",
    "BatchHandle": "kinetic_core.batch",
    "shared_poller": "kinetic_core.polling",
    "SharedPoller": "kinetic_core.polling",
    "validate_id": "kinetic_core.ids",
    **{
        name: "kinetic_core.errors"
        for name in (
            "KineticError",
            "ConfigError",
            "InvalidIdError",
            "SubmissionError",
            "SerializationError",
            "StorageError",
            "BackendError",
            "JobNotFound",
            "PayloadIntegrityError",
            "WaitTimeout",
            "JobCancelled",
            "JobFailed",
            "ResultNotAvailable",
            "RemoteError",
            "BatchError",
        )
    },
}

__all__ = sorted(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kinetic_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])


if TYPE_CHECKING:
    from kinetic_core.batch import BatchHandle, attach_batch, submit_map
    from kinetic_core.config import Target, positive_seconds
    from kinetic_core.errors import (
        BackendError,
        BatchError,
        ConfigError,
        InvalidIdError,
        JobCancelled,
        JobFailed,
        JobNotFound,
        KineticError,
        PayloadIntegrityError,
        RemoteError,
        ResultNotAvailable,
        SerializationError,
        StorageError,
        SubmissionError,
        WaitTimeout,
    )
    from kinetic_core.ids import validate_id
    from kinetic_core.jobs import JobHandle, RemoteFunction, attach, list_jobs, run, submit
    from kinetic_core.polling import SharedPoller, shared_poller
    from kinetic_core.status import JobState, JobStatus, resolve_states
