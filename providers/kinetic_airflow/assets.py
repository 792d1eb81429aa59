"""What a successful job tells Airflow's assets: the extra of each outlet's asset event.

A task with ``outlets=[Asset(...)]`` emits one asset event per asset on success; its
``extra`` carries the job (``job_id``, ``attempt``, ``output_uri``, ``backend``), what it
used (``usage``: ``kc.Usage.to_dict()``, chip-hours per attempt, useful and lost, cost with
a price table) and, when the function returned a dict, its numeric entries as ``metrics``,
so a DAG scheduled on the asset can read them from ``triggering_asset_events``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from numbers import Real
from typing import Any

import kinetic_core as kc

log = logging.getLogger(__name__)


def metrics_of(value: Any) -> dict[str, float | int]:
    """The numeric entries of a returned dict (booleans are not metrics); {} otherwise."""
    if not isinstance(value, Mapping):
        return {}
    return {
        str(k): v if isinstance(v, int) else float(v)  # numpy scalars become JSON numbers
        for k, v in value.items()
        if isinstance(v, Real) and not isinstance(v, bool) and v == v  # NaN is not JSON
    }


def output_uri(handle: kc.JobHandle) -> str:
    """The job's output folder as a URI (local storage gives a plain path)."""
    out = handle.output_dir
    return out if "://" in out else f"file://{out}"


def job_extra(handle: kc.JobHandle, value: Any = None) -> dict[str, Any]:
    """The asset-event extra of ``handle``'s success (JSON-serializable)."""
    extra: dict[str, Any] = {
        "job_id": handle.job_id,
        "attempt": handle.attempt,
        "output_uri": output_uri(handle),
        "backend": handle.target.get("backend") or "local",
    }
    usage = usage_of(handle)
    if usage is not None:
        extra["usage"] = usage.to_dict()
    metrics = metrics_of(value)
    if metrics:
        extra["metrics"] = metrics
    return extra


def usage_of(handle: kc.JobHandle) -> kc.Usage | None:
    """The job's usage; None (logged) when it cannot be read: observability never fails
    the task."""
    try:
        return handle.usage()
    except (kc.KineticError, OSError) as exc:
        log.warning("Cannot read the usage of kinetic job %s: %s", handle.job_id, exc)
        return None


def usage_line(handle: kc.JobHandle) -> str:
    """The task log's last line: ``Kinetic job ID usage: 2 attempts on tpu-v5e-16 ...``."""
    usage = usage_of(handle)
    return f"Kinetic job {handle.job_id} {usage.describe() if usage else 'usage: unavailable'}"


def asset_outlets(outlets: Iterable[Any]) -> list[Any]:
    """The outlets that are assets (aliases and other outlets get no extra from us)."""
    from airflow.sdk import Asset

    return [outlet for outlet in outlets or () if isinstance(outlet, Asset)]


def annotate_outlets(
    context: Mapping[str, Any], outlets: Iterable[Any], handle: kc.JobHandle, value: Any
) -> None:
    """Put the job's extra on each asset outlet's event (no outlets: nothing to do)."""
    assets = asset_outlets(outlets)
    if not assets:
        return
    events = context.get("outlet_events")
    if events is None:
        return
    extra = job_extra(handle, value)
    for asset in assets:
        events[asset].extra.update(extra)
