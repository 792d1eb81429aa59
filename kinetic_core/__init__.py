"""kinetic_core: submit a Python function as a detached job, observe it, collect it, reattach.

This module is the whole public API. Names load lazily so that ``python -m
kinetic_core.runner`` (inside every job) imports only what it uses.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # not `from typing import ...`: importing typing costs the runner ~5 ms

_EXPORTS = {
    "run": "kinetic_core.decorator",
    "RemoteFunction": "kinetic_core.decorator",
    "submit": "kinetic_core.submission",
    "asubmit": "kinetic_core.submission",
    "attach": "kinetic_core.jobs",
    "list_jobs": "kinetic_core.listing",
    "batch_of": "kinetic_core.listing",
    "repair_index": "kinetic_core.listing",
    "RepairReport": "kinetic_core.listing",
    "tags": "kinetic_core.listing",
    "parse_when": "kinetic_core.listing",
    "collect_garbage": "kinetic_core.gc",
    "acollect_garbage": "kinetic_core.gc",
    "GcReport": "kinetic_core.gc",
    "JobHandle": "kinetic_core.jobs",
    "LogStream": "kinetic_core.logs",
    "log_workers_option": "kinetic_core.logs",
    "JobStatus": "kinetic_core.states",
    "JobState": "kinetic_core.states",
    "ChildStatus": "kinetic_core.states",
    "resolve_states": "kinetic_core.status",
    "Target": "kinetic_core.config",
    "BACKENDS": "kinetic_core.config",
    "positive_seconds": "kinetic_core.config",
    "TargetOption": "kinetic_core.options",
    "target_options": "kinetic_core.options",
    "submit_map": "kinetic_core.batch",
    "asubmit_map": "kinetic_core.batch",
    "attach_batch": "kinetic_core.batch",
    "aattach_batch": "kinetic_core.batch",
    "list_batches": "kinetic_core.batch",
    "BatchHandle": "kinetic_core.batch",
    "BatchProgress": "kinetic_core.batch",
    "FailedChild": "kinetic_core.batch",
    "shared_poller": "kinetic_core.polling",
    "SharedPoller": "kinetic_core.polling",
    "background_loop": "kinetic_core.polling",
    "run_in_background": "kinetic_core.polling",
    "on_background_loop": "kinetic_core.polling",
    "validate_id": "kinetic_core.ids",
    "describe_failure": "kinetic_core.failures",
    "describe_batch_failure": "kinetic_core.failures",
    "failure_of": "kinetic_core.failures",
    "job_links": "kinetic_core.links",
    "LINK_KINDS": "kinetic_core.links",
    "cancel_on_termination": "kinetic_core.termination",
    "install_termination_handler": "kinetic_core.termination",
    "preempted": "kinetic_core.notice",
    "on_preemption": "kinetic_core.notice",
    "Transition": "kinetic_core.history",
    "register_hooks": "kinetic_core.hooks",
    "unregister_hooks": "kinetic_core.hooks",
    "SubmitSpec": "kinetic_core.hooks",
    "Data": "kinetic_core.data",
    "dashboard_app": "kinetic_core.ui",
    "find_data": "kinetic_core.data",
    "sync_outputs": "kinetic_core.outputs",
    "worker": "kinetic_core.workers",
    "Worker": "kinetic_core.workers",
    "SignalAck": "kinetic_core.signals",
    "SignalRequest": "kinetic_core.signals",
    "GpuSample": "kinetic_core.telemetry",
    "JobTop": "kinetic_core.telemetry",
    "WorkerSample": "kinetic_core.telemetry",
    "PortForward": "kinetic_core.ports",
    "PortSpec": "kinetic_core.ports",
    "parse_ports": "kinetic_core.ports",
    "Usage": "kinetic_core.usage",
    "AttemptUsage": "kinetic_core.usage",
    "usage_summary": "kinetic_core.usage",
    **{
        name: "kinetic_core.errors"
        for name in (
            "KineticError",
            "ConfigError",
            "InvalidIdError",
            "PermissionDenied",
            "SubmissionError",
            "SubmissionRefused",
            "SerializationError",
            "StorageError",
            "BackendError",
            "JobNotFound",
            "JobNotRunning",
            "CorruptRecord",
            "PayloadIntegrityError",
            "PayloadFormatUnsupported",
            "JobSetupError",
            "ImageMismatch",
            "RequirementsFailed",
            "WaitTimeout",
            "JobCancelled",
            "JobFailed",
            "ResultNotAvailable",
            "SignalRefused",
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
    from kinetic_core.batch import (
        BatchHandle,
        BatchProgress,
        FailedChild,
        aattach_batch,
        asubmit_map,
        attach_batch,
        list_batches,
        submit_map,
    )
    from kinetic_core.config import BACKENDS, Target, positive_seconds
    from kinetic_core.data import Data, find_data
    from kinetic_core.decorator import RemoteFunction, run
    from kinetic_core.errors import (
        BackendError,
        BatchError,
        ConfigError,
        CorruptRecord,
        ImageMismatch,
        InvalidIdError,
        JobCancelled,
        JobFailed,
        JobNotFound,
        JobNotRunning,
        JobSetupError,
        KineticError,
        PayloadFormatUnsupported,
        PayloadIntegrityError,
        PermissionDenied,
        RemoteError,
        RequirementsFailed,
        ResultNotAvailable,
        SerializationError,
        SignalRefused,
        StorageError,
        SubmissionError,
        SubmissionRefused,
        WaitTimeout,
    )
    from kinetic_core.failures import describe_batch_failure, describe_failure, failure_of
    from kinetic_core.gc import GcReport, acollect_garbage, collect_garbage
    from kinetic_core.history import Transition
    from kinetic_core.hooks import SubmitSpec, register_hooks, unregister_hooks
    from kinetic_core.ids import validate_id
    from kinetic_core.jobs import JobHandle, attach
    from kinetic_core.links import LINK_KINDS, job_links
    from kinetic_core.listing import (
        RepairReport,
        batch_of,
        list_jobs,
        parse_when,
        repair_index,
        tags,
    )
    from kinetic_core.logs import LogStream, log_workers_option
    from kinetic_core.notice import on_preemption, preempted
    from kinetic_core.options import TargetOption, target_options
    from kinetic_core.outputs import sync_outputs
    from kinetic_core.polling import (
        SharedPoller,
        background_loop,
        on_background_loop,
        run_in_background,
        shared_poller,
    )
    from kinetic_core.ports import PortForward, PortSpec, parse_ports
    from kinetic_core.signals import SignalAck, SignalRequest
    from kinetic_core.states import ChildStatus, JobState, JobStatus
    from kinetic_core.status import resolve_states
    from kinetic_core.submission import asubmit, submit
    from kinetic_core.telemetry import GpuSample, JobTop, WorkerSample
    from kinetic_core.termination import cancel_on_termination, install_termination_handler
    from kinetic_core.ui import dashboard_app
    from kinetic_core.usage import AttemptUsage, Usage, usage_summary
    from kinetic_core.workers import Worker, worker
