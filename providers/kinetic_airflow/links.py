"""Extra link "Kinetic job": the job's folder in the GCS console, or its storage location."""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperatorLink

import kinetic_core as kc

XCOM_JOB_URL = "kinetic_job_url"


def job_url(handle: kc.JobHandle) -> str:
    """A URL a person can open: GCS console for gs:// storage, else the job folder URI."""
    location = handle.location
    if location.startswith("gs://"):
        return "https://console.cloud.google.com/storage/browser/" + location[len("gs://") :]
    return location


class KineticJobLink(BaseOperatorLink):
    """Points at the job that the task submitted (pushed to XCom ``kinetic_job_url`` at submit)."""

    name = "Kinetic job"

    @property
    def xcom_key(self) -> str:
        return XCOM_JOB_URL

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        from airflow.sdk.execution_time.xcom import XCom

        return XCom.get_value(ti_key=ti_key, key=XCOM_JOB_URL) or ""
