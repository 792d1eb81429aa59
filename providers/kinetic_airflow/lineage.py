"""OpenLineage for a kinetic job: its output folder as the output dataset, a ``kinetic`` run facet.

Used only where ``apache-airflow-providers-openlineage`` is installed (every import of it
is guarded); without it ``job_lineage`` returns None. Inputs would come from ``Data``
arguments, which kinetic does not have yet.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import kinetic_core as kc
from kinetic_airflow.assets import output_uri

RUN_FACET = "kinetic"


def dataset_name(uri: str) -> tuple[str, str]:
    """OpenLineage ``(namespace, name)`` of a storage URI (``gs://bucket`` + path, ``file`` + path)."""
    scheme, _, rest = uri.partition("://")
    if scheme == "file":
        return "file", rest
    bucket, _, path = rest.partition("/")
    return f"{scheme}://{bucket}", path


@cache
def _run_facet_class() -> Any:
    """The ``kinetic`` run facet type (built on first use: attrs class of the OpenLineage client)."""
    import attr
    from airflow.providers.common.compat.openlineage.facet import RunFacet

    @attr.define
    class KineticRunFacet(RunFacet):  # type: ignore[misc,unused-ignore]
        """Where and how the task's kinetic job ran."""

        jobId: str
        backend: str
        accelerator: str | None
        spot: bool
        attempt: int

    return KineticRunFacet


def job_lineage(handle: kc.JobHandle) -> Any | None:
    """``OperatorLineage`` for ``handle``'s job, or None without the OpenLineage provider."""
    try:
        from airflow.providers.common.compat.openlineage.facet import Dataset
        from airflow.providers.openlineage.extractors import OperatorLineage
    except ImportError:
        return None
    target = handle.target
    facet = _run_facet_class()(
        jobId=handle.job_id,
        backend=target.get("backend") or "local",
        accelerator=target.get("accelerator"),
        spot=bool(target.get("spot")),
        attempt=handle.attempt,
    )
    namespace, name = dataset_name(output_uri(handle))
    return OperatorLineage(
        inputs=[],
        outputs=[Dataset(namespace=namespace, name=name)],
        run_facets={RUN_FACET: facet},
    )
