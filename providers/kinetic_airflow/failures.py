"""The Airflow error of a failed kinetic job or batch (the message comes from the core)."""

from __future__ import annotations

from kinetic_airflow.compat import AirflowException


class KineticJobError(AirflowException):
    """The remote job failed, was cancelled or lost. The message carries the remote
    exception and traceback, the job's reason and the tail of its log."""
