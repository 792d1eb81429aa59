"""A recovered job's attempts, as the dashboard shows them: one job, one row, one page.

A recovery starts attempt n+1 under a new id (``recovered_from`` names attempt n; see
``kinetic_core.control.recovery``). Airflow and Prefect link to the id they submitted,
attempt 1's; a listing holds every attempt's handle. Here every attempt is mapped to its
first one (the job's id on the pages) and a job's attempts are told oldest first, through
the facade only (``attach`` and the state resolution, which follows recoveries).
"""

from __future__ import annotations

from typing import Any

import kinetic_core as kc

#: Longest chain followed (a chain is as long as ``max_recoveries`` allows: short).
MAX_ATTEMPTS = 100


def first_attempt(handle: kc.JobHandle, target: kc.Target) -> kc.JobHandle:
    """Attempt 1 of ``handle``'s job (``handle`` itself, the same object, unless a recovery
    started it); an earlier attempt cleaned up to nothing ends the walk at the oldest one
    left."""
    seen = 0
    while handle.recovered_from and seen < MAX_ATTEMPTS:
        try:
            handle = kc.attach(handle.recovered_from, target=target)
        except kc.JobNotFound:
            break
        seen += 1
    return handle


def chain(handle: kc.JobHandle, state: kc.JobState, target: kc.Target) -> list[kc.JobHandle]:
    """Every attempt of the job, oldest first: from its newest (``state.job_id``, the
    resolution followed the recoveries) back to the first."""
    newest = handle
    if state.job_id != handle.job_id:
        try:
            newest = kc.attach(state.job_id, target=target)
        except kc.JobNotFound:
            newest = handle
    found = [newest]
    while found[0].recovered_from and len(found) < MAX_ATTEMPTS:
        try:
            earlier = kc.attach(found[0].recovered_from, target=target)
        except kc.JobNotFound:
            break
        found.insert(0, earlier)
    return found


def pick(attempts: list[kc.JobHandle], attempt: int | None) -> kc.JobHandle:
    """Attempt number ``attempt`` of the chain (None: the newest); ConfigError for a
    number the job has not."""
    if attempt is None:
        return attempts[-1]
    for handle in attempts:
        if handle.attempt == attempt:
            return handle
    numbers = ", ".join(str(h.attempt) for h in attempts)
    raise kc.ConfigError(f"attempt must be one of this job's attempts ({numbers}), got {attempt}.")


def described(attempts: list[kc.JobHandle]) -> list[dict[str, Any]]:
    """The attempts as the page lists them (its attempt picker, the API)."""
    return [
        {"attempt": h.attempt, "job_id": h.job_id, "created_at": h.created_at} for h in attempts
    ]
