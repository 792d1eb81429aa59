"""OpenLineage for a kinetic job: its ``Data`` arguments as input datasets, its output
folder as the output dataset, a ``kinetic`` run facet (attempt, recoveries).

Used only where ``apache-airflow-providers-openlineage`` is installed (every import of it
is guarded); without it ``job_lineage`` returns None. Dataset names follow the OpenLineage
naming spec (https://openlineage.io/docs/spec/naming): ``file`` + absolute path for local
files, ``gs://bucket`` + object path for GCS.
"""

from __future__ import annotations

import logging
from functools import cache
from typing import Any

import kinetic_core as kc
from kinetic_airflow.assets import output_uri

RUN_FACET = "kinetic"

log = logging.getLogger(__name__)


def dataset_name(uri: str) -> tuple[str, str]:
    """OpenLineage ``(namespace, name)`` of a storage URI (``gs://bucket`` + path, ``file`` + path);
    a folder's trailing ``/`` is not part of its name."""
    scheme, _, rest = uri.partition("://")
    if scheme == "file":
        return "file", rest.rstrip("/") or "/"
    bucket, _, path = rest.partition("/")
    return f"{scheme}://{bucket}", path.rstrip("/") or "/"


def data_uri(data: kc.Data) -> str:
    """Where a ``Data`` argument's bytes come from: its gs:// URI, or file:// + its absolute
    path (a relative path is resolved where the task runs, as ``submit`` resolves it)."""
    return data.path if data.remote else "file://" + data.local_path


@cache
def _run_facet_class() -> Any:
    """The ``kinetic`` run facet type (built on first use: attrs class of the OpenLineage client)."""
    import attr
    from airflow.providers.common.compat.openlineage.facet import RunFacet

    @attr.define
    class KineticRunFacet(RunFacet):  # type: ignore[misc,unused-ignore]
        """Where and how the task's kinetic job ran: ``attempt`` counts every start (a
        retry's resubmit, a recovery), ``recoveries`` the restarts after a preemption, a
        lost job or a listed exit code."""

        jobId: str
        backend: str
        accelerator: str | None
        spot: bool
        attempt: int
        recoveries: int

    return KineticRunFacet


def _attempts(handle: kc.JobHandle) -> tuple[int, int]:
    """(attempt, recoveries) of the job's newest attempt; the handle's own where the state
    cannot be read (lineage never fails the task)."""
    try:
        state = handle.state()
    except kc.KineticError as exc:
        log.warning("Lineage of kinetic job %s: state not read (%s)", handle.job_id, exc)
        return handle.attempt, handle.recoveries
    return state.attempt, state.recoveries


def job_lineage(handle: kc.JobHandle, arguments: Any = ()) -> Any | None:
    """``OperatorLineage`` for ``handle``'s job called with ``arguments`` (its args and
    kwargs: every ``Data`` among them is an input), or None without the OpenLineage provider."""
    try:
        from airflow.providers.common.compat.openlineage.facet import Dataset
        from airflow.providers.openlineage.extractors import OperatorLineage
    except ImportError:
        return None
    target = handle.target
    attempt, recoveries = _attempts(handle)
    facet = _run_facet_class()(
        jobId=handle.job_id,
        backend=target.get("backend") or "local",
        accelerator=target.get("accelerator"),
        spot=bool(target.get("spot")),
        attempt=attempt,
        recoveries=recoveries,
    )
    inputs = dict.fromkeys(dataset_name(data_uri(d)) for d in kc.find_data(arguments))
    namespace, name = dataset_name(output_uri(handle))
    return OperatorLineage(
        inputs=[Dataset(namespace=ns, name=n) for ns, n in inputs],
        outputs=[Dataset(namespace=namespace, name=name)],
        run_facets={RUN_FACET: facet},
    )
