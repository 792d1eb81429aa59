"""The kinetic operators: one job (``KineticOperator``) or one batch (``KineticBatchOperator``)."""

from __future__ import annotations

from kinetic_airflow.failures import KineticJobError
from kinetic_airflow.operators.batch import KineticBatchOperator
from kinetic_airflow.operators.job import KineticOperator

__all__ = ["KineticBatchOperator", "KineticJobError", "KineticOperator"]
