"""The last lines of ``make demo``: what ran where, and the next commands, exactly as they
work from this checkout.

Reads the demo's storage root (``KINETIC_STORAGE``, which ``make demo`` points at
``.kinetic-demo/`` in the checkout) and groups its jobs by who submitted them: the plain
``kinetic_core`` script, the Airflow DAG, the Prefect flow.
"""

from __future__ import annotations

import os
import shlex

import kinetic_core as kc


def who(job: kc.JobHandle) -> str:
    """Which part of the demo submitted ``job``: its tags say, or its batch's (a batch's
    driver job carries the batch's tags)."""
    group = kc.batch_of(job)
    tags = {**job.tags, **(kc.attach_batch(group).tags if group else {})}
    if job.name == "registry":  # both pipelines' publish step submits it with kc.submit
        return "the model registry (the publish steps)"
    if "airflow-dag-id" in tags:
        return f"Airflow DAG {tags['airflow-dag-id']}"
    if any(key.startswith("prefect-") for key in tags):
        return "Prefect flow nightly-training"
    return "kinetic_core script (demo_core.py)"


def main() -> None:
    storage = kc.Target().resolve().storage or ""
    jobs = kc.list_jobs(reverse=True)  # oldest first: the order they ran in
    states = kc.resolve_states(jobs) if jobs else []
    parts: dict[str, list[str]] = {}
    for job, state in zip(jobs, states, strict=True):
        reason = f" ({state.reason})" if state.reason else ""
        parts.setdefault(who(job), []).append(f"{job.name} {state.status.value}{reason}")
    print("\n== Summary ==")
    print(f"storage root: {storage} (local processes; KINETIC_STORAGE chose it)")
    for part, lines in parts.items():
        print(f"- {part}: {', '.join(lines)}")
    failed = [s for s in states if s.status is kc.JobStatus.FAILED]
    print(f"{len(jobs)} jobs, {len(failed)} failed.")
    env = f"KINETIC_STORAGE={shlex.quote(storage)}"
    kinetic = os.path.relpath(os.path.join(os.path.dirname(__file__), "..", ".venv/bin/kinetic"))
    newest = jobs[-1].job_id if jobs else "JOB_ID"
    print("\nNext, from this folder:")
    print(f"  {env} {kinetic} jobs list")
    print(f"  {env} {kinetic} jobs history {newest}")
    print(f"  {env} {kinetic} jobs logs {newest}")
    print(f"  {env} {kinetic} ui        # the dashboard; it prints its address")


if __name__ == "__main__":
    main()
