"""Airflow 3 provider for kinetic-workflows: deferrable operator, trigger, sensor, batch, @task.kinetic."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "KineticOperator": "kinetic_airflow.operators.job",
    "KineticBatchOperator": "kinetic_airflow.operators.batch",
    "KineticJobError": "kinetic_airflow.failures",
    "KineticJobSensor": "kinetic_airflow.sensors",
    "KineticJobTrigger": "kinetic_airflow.triggers",
    "KineticBatchTrigger": "kinetic_airflow.triggers",
    "KineticHook": "kinetic_airflow.hooks",
    "KineticJobLink": "kinetic_airflow.links",
    "KineticJobLogsLink": "kinetic_airflow.links",
    "KineticJobFilesLink": "kinetic_airflow.links",
    "kinetic_task": "kinetic_airflow.decorators",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Lazy imports: ``provider_info`` must load without importing Airflow's task SDK."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kinetic_airflow' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
