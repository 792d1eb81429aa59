"""kinetic_core: submit a Python function as a detached job, observe it, collect it, reattach.

This module is the whole public API. Names load lazily so that ``python -m
kinetic_core.runtime.runner`` (inside every job) imports only what it uses.
"""

from __future__ import annotations

import importlib

from kinetic_core.util import moved
from kinetic_core.util.version import __version__

TYPE_CHECKING = False  # not `from typing import ...`: importing typing costs the runner ~5 ms

_EXPORTS = {
    "run": "kinetic_core.ops.decorator",
    "RemoteFunction": "kinetic_core.ops.decorator",
    "submit": "kinetic_core.jobs.submission",
    "asubmit": "kinetic_core.jobs.submission",
    "attach": "kinetic_core.jobs.handle",
    "list_jobs": "kinetic_core.jobs.listing",
    "batch_of": "kinetic_core.jobs.listing",
    "repair_index": "kinetic_core.jobs.listing",
    "RepairReport": "kinetic_core.jobs.listing",
    "tags": "kinetic_core.jobs.listing",
    "parse_when": "kinetic_core.jobs.listing",
    "collect_garbage": "kinetic_core.ops.gc",
    "acollect_garbage": "kinetic_core.ops.gc",
    "GcReport": "kinetic_core.ops.gc",
    "JobHandle": "kinetic_core.jobs.handle",
    "LogStream": "kinetic_core.control.logs",
    "log_workers_option": "kinetic_core.control.logs",
    "JobStatus": "kinetic_core.states",
    "JobState": "kinetic_core.states",
    "ChildStatus": "kinetic_core.states",
    "resolve_states": "kinetic_core.control.resolution",
    "Target": "kinetic_core.config.target",
    "BACKENDS": "kinetic_core.config.target",
    "positive_seconds": "kinetic_core.config.target",
    "TargetOption": "kinetic_core.config.options",
    "target_options": "kinetic_core.config.options",
    "submit_map": "kinetic_core.batch",
    "asubmit_map": "kinetic_core.batch",
    "attach_batch": "kinetic_core.batch",
    "aattach_batch": "kinetic_core.batch",
    "list_batches": "kinetic_core.batch",
    "BatchHandle": "kinetic_core.batch",
    "BatchProgress": "kinetic_core.batch",
    "FailedChild": "kinetic_core.batch",
    "shared_poller": "kinetic_core.control.polling",
    "SharedPoller": "kinetic_core.control.polling",
    "background_loop": "kinetic_core.control.polling",
    "run_in_background": "kinetic_core.control.polling",
    "on_background_loop": "kinetic_core.control.polling",
    "validate_id": "kinetic_core.util.ids",
    "describe_failure": "kinetic_core.jobs.failures",
    "describe_batch_failure": "kinetic_core.jobs.failures",
    "failure_of": "kinetic_core.jobs.failures",
    "failure_data": "kinetic_core.jobs.failures",
    "Preview": "kinetic_core.records.preview",
    "job_links": "kinetic_core.jobs.links",
    "LINK_KINDS": "kinetic_core.jobs.links",
    "cancel_on_termination": "kinetic_core.ops.termination",
    "install_termination_handler": "kinetic_core.ops.termination",
    "preempted": "kinetic_core.runtime.notice",
    "on_preemption": "kinetic_core.runtime.notice",
    "Transition": "kinetic_core.records.history",
    "register_hooks": "kinetic_core.config.hooks",
    "unregister_hooks": "kinetic_core.config.hooks",
    "SubmitSpec": "kinetic_core.config.hooks",
    "Data": "kinetic_core.data.inputs",
    "dashboard_app": "kinetic_core.ui",
    "find_data": "kinetic_core.data.inputs",
    "sync_outputs": "kinetic_core.data.outputs",
    "worker": "kinetic_core.util.workers",
    "Worker": "kinetic_core.util.workers",
    "SignalAck": "kinetic_core.runtime.signals",
    "SignalRequest": "kinetic_core.runtime.signals",
    "GpuSample": "kinetic_core.runtime.telemetry",
    "JobTop": "kinetic_core.runtime.telemetry",
    "WorkerSample": "kinetic_core.runtime.telemetry",
    "PortForward": "kinetic_core.util.ports",
    "PortSpec": "kinetic_core.util.ports",
    "parse_ports": "kinetic_core.util.ports",
    "Usage": "kinetic_core.control.usage",
    "AttemptUsage": "kinetic_core.control.usage",
    "usage_summary": "kinetic_core.control.usage",
    **{
        name: "kinetic_core.errors"
        for name in (
            "KineticError",
            "ConfigError",
            "InvalidIdError",
            "PermissionDenied",
            "SubmissionError",
            "SubmissionRefused",
            "IdempotencyConflict",
            "SerializationError",
            "StorageError",
            "OutputsNotSynced",
            "BackendError",
            "JobNotFound",
            "JobNotRunning",
            "JobStillRunning",
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
moved.install()  # old module paths that stores and pod commands name (util/moved.py)


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
    from kinetic_core.config.hooks import SubmitSpec, register_hooks, unregister_hooks
    from kinetic_core.config.options import TargetOption, target_options
    from kinetic_core.config.target import BACKENDS, Target, positive_seconds
    from kinetic_core.control.logs import LogStream, log_workers_option
    from kinetic_core.control.polling import (
        SharedPoller,
        background_loop,
        on_background_loop,
        run_in_background,
        shared_poller,
    )
    from kinetic_core.control.resolution import resolve_states
    from kinetic_core.control.usage import AttemptUsage, Usage, usage_summary
    from kinetic_core.data.inputs import Data, find_data
    from kinetic_core.data.outputs import sync_outputs
    from kinetic_core.errors import (
        BackendError,
        BatchError,
        ConfigError,
        CorruptRecord,
        IdempotencyConflict,
        ImageMismatch,
        InvalidIdError,
        JobCancelled,
        JobFailed,
        JobNotFound,
        JobNotRunning,
        JobSetupError,
        JobStillRunning,
        KineticError,
        OutputsNotSynced,
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
    from kinetic_core.jobs.failures import (
        describe_batch_failure,
        describe_failure,
        failure_data,
        failure_of,
    )
    from kinetic_core.jobs.handle import JobHandle, attach
    from kinetic_core.jobs.links import LINK_KINDS, job_links
    from kinetic_core.jobs.listing import (
        RepairReport,
        batch_of,
        list_jobs,
        parse_when,
        repair_index,
        tags,
    )
    from kinetic_core.jobs.submission import asubmit, submit
    from kinetic_core.ops.decorator import RemoteFunction, run
    from kinetic_core.ops.gc import GcReport, acollect_garbage, collect_garbage
    from kinetic_core.ops.termination import cancel_on_termination, install_termination_handler
    from kinetic_core.records.history import Transition
    from kinetic_core.records.preview import Preview
    from kinetic_core.runtime.notice import on_preemption, preempted
    from kinetic_core.runtime.signals import SignalAck, SignalRequest
    from kinetic_core.runtime.telemetry import GpuSample, JobTop, WorkerSample
    from kinetic_core.states import ChildStatus, JobState, JobStatus
    from kinetic_core.ui import dashboard_app
    from kinetic_core.util.ids import validate_id
    from kinetic_core.util.ports import PortForward, PortSpec, parse_ports
    from kinetic_core.util.workers import Worker, worker
