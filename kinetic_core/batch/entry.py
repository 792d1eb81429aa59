"""Batch entry points: ``submit_map`` fans a function out, ``attach_batch`` and
``list_batches`` find batches again from any process."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

import cloudpickle

from kinetic_core.batch.handle import DEFAULT_POLL_TIMEOUT, BatchHandle
from kinetic_core.batch.manifest import read_manifest, signed_manifest
from kinetic_core.batch.stager import check_driver, reopen_if_failed, stage_children, start_driver
from kinetic_core.config.target import Target, validate_tags
from kinetic_core.errors import ConfigError, JobNotFound, SubmissionError
from kinetic_core.jobs.listing import resolve_owner
from kinetic_core.records import layout
from kinetic_core.storage import open_storage
from kinetic_core.util.ids import key_digest, new_id, validate_id
from kinetic_core.util.seed_names import old_keywords
from kinetic_core.util.waits import in_thread

__all__ = ["aattach_batch", "asubmit_map", "attach_batch", "list_batches", "submit_map"]

INPUT_MODES = ("auto", "args", "kwargs", "single")


def _to_call(item: Any, mode: str, index: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Input item -> (args, kwargs): dict -> **kwargs, tuple/list -> *args, else one arg."""
    if mode == "auto":
        mode = (
            "kwargs"
            if isinstance(item, dict)
            else "args"
            if isinstance(item, tuple | list)
            else "single"
        )
    if mode == "single":
        return (item,), {}
    if mode == "args":
        if not isinstance(item, tuple | list):
            raise ConfigError(
                f"Input {index} must be a tuple or list in input_mode='args', got {item!r}."
            )
        return tuple(item), {}
    if not isinstance(item, dict) or not all(isinstance(k, str) and k.isidentifier() for k in item):
        raise ConfigError(
            f"Input {index} must be a dict whose keys are Python identifiers in kwargs mode, got {item!r}. "
            "Use input_mode='single' to pass dicts as one argument."
        )
    return (), dict(item)


def submit_map(
    fn: Callable[..., Any],
    inputs: Any,
    *,
    target: Target | dict[str, Any] | None = None,
    max_concurrency: int = 64,
    retries: int = 0,
    input_mode: str = "auto",
    name: str | None = None,
    tags: dict[str, str] | None = None,
    idempotency_key: str | None = None,
    fail_fast: bool = False,
) -> BatchHandle:
    """Submit ``fn`` once per input as one batch; returns once every child's call is
    staged in storage and the batch's detached driver is started.

    From then on the batch runs to its end (at most ``max_concurrency`` children at a
    time, ``retries`` more attempts per failed child, durable ``cancel()``) whether or
    not this process lives. ``fail_fast=True`` stops the batch once a child failed for
    good: nothing more is launched, running children are cancelled. With
    ``idempotency_key`` a second call reattaches to the same batch.
    """
    if not callable(fn):
        raise SubmissionError(f"Expected a callable to map, got {type(fn).__name__}.")
    items = list(inputs) if not isinstance(inputs, str | bytes) else None
    if not items:
        raise ConfigError("inputs must be a non-empty list (one item per child job).")
    if (
        not isinstance(max_concurrency, int)
        or isinstance(max_concurrency, bool)
        or max_concurrency < 1
    ):
        raise ConfigError(f"max_concurrency must be an integer >= 1, got {max_concurrency!r}.")
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise ConfigError(f"retries must be an integer >= 0, got {retries!r}.")
    if not isinstance(fail_fast, bool):
        raise ConfigError(f"fail_fast must be True or False, got {fail_fast!r}.")
    if input_mode not in INPUT_MODES:
        raise ConfigError(
            f"Unknown input_mode {input_mode!r}; choose one of {', '.join(INPUT_MODES)}."
        )
    calls = [_to_call(item, input_mode, i) for i, item in enumerate(items)]
    try:
        cloudpickle.dumps(fn)
    except Exception as exc:
        raise SubmissionError(f"Cannot serialize {fn!r} for the batch: {exc}") from exc
    resolved = Target.coerce(target).resolve()
    batch_name: str = name or getattr(fn, "__qualname__", None) or "batch"
    all_tags = {**(resolved.tags or {}), **validate_tags(tags or {})}
    group_id = f"b{key_digest(idempotency_key)[:24]}" if idempotency_key else new_id(batch_name)
    created_at = time.time()
    manifest = {
        "version": 1,
        "group_id": group_id,
        "name": batch_name,
        "tags": all_tags,
        "owner": resolve_owner(None),  # each child's owner (KINETIC_OWNER, else the user)
        "total_expected": len(calls),
        "created_at": created_at,
        "storage": resolved.storage,
        "target": resolved.to_dict(),
        "input_mode": input_mode,
        "retries": retries,
        "max_concurrency": max_concurrency,
        "idempotency_key": idempotency_key,
        "fail_fast": fail_fast,
        # Where children run on the local backend: the submitter's import path and folder.
        "python_path": [p for p in sys.path if p],
        "workdir": os.getcwd(),
    }
    check_driver(group_id, resolved)  # before anything is written
    storage = open_storage(resolved.storage or "")
    try:
        storage.write_bytes(
            layout.manifest(group_id),
            signed_manifest(manifest, resolved.signing_key),
            create_only=True,
        )
    except FileExistsError:
        if idempotency_key is None:
            raise
        manifest = read_manifest(storage, group_id, resolved.signing_key)
        if manifest["total_expected"] != len(calls):
            raise ConfigError(
                f"Batch {group_id} (idempotency_key {idempotency_key!r}) has "
                f"{manifest['total_expected']} inputs, not {len(calls)}: use a new key for new inputs."
            ) from None
    batch = BatchHandle(manifest, signing_key=resolved.signing_key)
    batch.reattached = manifest["created_at"] != created_at
    if not (batch.reattached and batch.cancel_requested):
        if batch.reattached:
            reopen_if_failed(batch.records)
        stage_children(batch.records, fn, calls, resolved, batch_name)
        start_driver(batch.records, resolved)
    return batch


_ATTACH_UNNEEDED = {
    "poll_interval": "a batch is whole once submit_map returns, so there is no manifest to "
    "poll; a wait's interval is as_completed(poll_interval=)",
}


def attach_batch(
    group_id: str,
    *,
    target: Target | dict[str, Any] | None = None,
    poll_timeout: float = DEFAULT_POLL_TIMEOUT,
    **kinetic_names: Any,
) -> BatchHandle:
    """Rebuild a batch handle in another process. Waits on it default to ``poll_timeout``.
    ``poll_interval=`` (kinetic's manifest polling) has no use here and is dropped with a
    DeprecationWarning: a batch is whole once ``submit_map`` returns."""
    old_keywords("attach_batch", kinetic_names, {}, _ATTACH_UNNEEDED)
    validate_id(group_id, "group id")
    resolved = Target.coerce(target).resolve()
    manifest = read_manifest(open_storage(resolved.storage or ""), group_id, resolved.signing_key)
    return BatchHandle(manifest, signing_key=resolved.signing_key, poll_timeout=poll_timeout)


def list_batches(
    *, target: Target | dict[str, Any] | None = None, limit: int | None = None
) -> list[BatchHandle]:
    """Batches under the storage root, newest first. A batch whose manifest cannot be
    read (being created right now, or damaged) is left out."""
    resolved = Target.coerce(target).resolve()
    storage = open_storage(resolved.storage or "")
    batches = []
    for group_id in storage.list_names(layout.BATCHES):
        try:
            manifest = read_manifest(
                storage, validate_id(group_id, "group id"), resolved.signing_key
            )
            batches.append(BatchHandle(manifest, signing_key=resolved.signing_key))
        except (JobNotFound, ConfigError, ValueError, KeyError):
            continue
    batches.sort(key=lambda b: b.created_at, reverse=True)
    return batches[:limit] if limit is not None else batches


asubmit_map = in_thread(submit_map)
aattach_batch = in_thread(attach_batch)
