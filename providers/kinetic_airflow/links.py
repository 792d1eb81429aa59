"""Extra links: the job's pages (``kc.job_links``) as Airflow operator links.

Airflow's UI shows only http(s) links, so the task pushes each link's URL to XCom and a
link without a page shows nothing (the local backend has none).
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperatorLink

import kinetic_core as kc

#: XCom key of each kind of link (``kc.LINK_KINDS``).
XCOM_KEYS = {"job": "kinetic_job_url", "logs": "kinetic_logs_url", "files": "kinetic_files_url"}


def link_xcoms(handle: kc.JobHandle | None) -> dict[str, str]:
    """Every link's XCom value, ``""`` where there is no page. Pushed by each task so that
    Airflow, which resolves every extra link when a task ends, finds a value for each
    (an XCom it cannot find is logged as an error in the task log)."""
    urls = kc.job_links(handle) if handle is not None else {}
    return {XCOM_KEYS[kind]: urls.get(kind, "") for kind in kc.LINK_KINDS}


class _XComLink(BaseOperatorLink):
    """A link whose URL the task pushed to XCom ``xcom_key``; no URL, no link."""

    key = ""

    @property
    def xcom_key(self) -> str:
        return self.key

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        from airflow.sdk.execution_time.xcom import XCom

        return XCom.get_value(ti_key=ti_key, key=self.key) or ""


class KineticJobLink(_XComLink):
    """The job's workload in the Cloud Console (Kubernetes/GKE targets with a project)."""

    name = "Kinetic job"
    key = XCOM_KEYS["job"]


class KineticJobLogsLink(_XComLink):
    """A Cloud Logging query for the job's pod (Kubernetes/GKE targets with a project)."""

    name = "Kinetic job logs"
    key = XCOM_KEYS["logs"]


class KineticJobFilesLink(_XComLink):
    """The job's folder in the GCS browser (``gs://`` storage)."""

    name = "Kinetic job files"
    key = XCOM_KEYS["files"]


LINKS = (KineticJobLink(), KineticJobLogsLink(), KineticJobFilesLink())
