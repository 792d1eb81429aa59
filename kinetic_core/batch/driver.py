"""The batch driver: launches children under ``max_concurrency``, retries, fails fast.

A driver step is idempotent and lease-free: any process may take one at any time (the
detached driver job, and every observer's tick), and racing steps launch each attempt of
each child once and never run more than ``max_concurrency`` children together:

- a launch is a ticket in the batch's ledger (``BatchRecords.take_ticket``), taken in
  sequence and create-only, after reading every earlier ticket;
- before taking ticket ``n`` a step counts the ticketed children not yet final; ticket
  ``n+1`` cannot exist before ticket ``n``, so every ticket's taker counted all earlier
  launches, and a final state never changes back;
- launching a ticketed attempt (``launch_staged``) is create-only per job id, so a step
  that finds a ticket whose launcher died launches it again harmlessly.

``drive_batch`` is the detached driver: a kinetic job itself (on the local backend a
supervised process in its own session; on Kubernetes a Job of the runner image), started
by ``submit_map`` and ending when every child is final.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kinetic_core.backends import BackendKind
from kinetic_core.batch.manifest import BatchRecords, Ticket, child_job_id, read_manifest
from kinetic_core.config.target import Target
from kinetic_core.control.polling import DEFAULT_INTERVAL, poll_ticks
from kinetic_core.control.resolution import resolve_states
from kinetic_core.errors import KineticError
from kinetic_core.jobs.handle import JobHandle, load_handle
from kinetic_core.jobs.submission import launch_staged
from kinetic_core.records import layout
from kinetic_core.records.envelope import rebind_envelope
from kinetic_core.states import JobState, JobStatus, Reason
from kinetic_core.storage import open_storage
from kinetic_core.util import registry
from kinetic_core.util.ids import keyed_id
from kinetic_core.util.parallel import parallel

DRIVER_KEY = "batch-driver/{group_id}/{round}"
# Extra attempts for a child whose launch a dying driver left half-done (it never ran).
RELAUNCHES = 3
# What a driver job asks of its backend: the batch's target without the children's
# accelerators and resources (it only launches and watches).
DRIVER_DROPS = ("accelerator", "resources", "spot", "node_selector", "tolerations")
#: Children a driver step launches at once (threads): enough to overlap the API's round
#: trips, few enough not to flood the API server or a 2-core driver pod.
LAUNCHERS = 8


@dataclass
class StepResult:
    """What one step saw: the latest launched attempt of each child and its state."""

    jobs: dict[int, JobHandle] = field(default_factory=dict)
    states: dict[int, JobState] = field(default_factory=dict)
    failures: dict[int, BaseException] = field(default_factory=dict)
    launched: list[int] = field(default_factory=list)
    cancelled: bool = False
    done: bool = False


class Driver:
    """One batch's launching logic; ``step()`` is one idempotent round of it."""

    def __init__(self, records: BatchRecords) -> None:
        self.records = records
        m = records.manifest
        self.retries: int = m["retries"]
        self.limit: int = m["max_concurrency"]
        self.fail_fast: bool = bool(m.get("fail_fast"))
        self.python_path: list[str] = m.get("python_path") or []
        self.workdir: str | None = m.get("workdir")
        self.final: dict[str, JobState] = {}  # terminal states by job id: they never change
        self.rounds = 0  # keyed resubmissions of a finished batch: each allows new attempts

    def interval(self) -> float:
        target = self.records.manifest["target"]
        return min(float(target.get("poll_interval") or DEFAULT_INTERVAL), 5.0)

    def step(self) -> StepResult:
        records = self.records
        records.read_ledger()
        self.rounds = records.rounds()
        failures = records.submission_failures()
        latest = records.latest_tickets()
        jobs = {i: records.handle_for(t) for i, t in latest.items()}
        watch = [i for i, job in jobs.items() if job.job_id not in self.final]
        found = resolve_states([jobs[i] for i in watch]) if watch else []
        states = {i: self.final[j.job_id] for i, j in jobs.items() if j.job_id in self.final}
        for i, state in zip(watch, found, strict=True):
            states[i] = state
            if state.terminal:
                self.final[state.job_id] = state
            elif state.reason == Reason.SUBMITTING:
                self._launch(latest[i])  # its launcher may have died: launching is idempotent
        result = StepResult(jobs, states, failures)
        cancelled = records.marker(layout.CANCEL_REQUESTED)
        if (
            self.fail_fast
            and not cancelled
            and any(
                s.status is JobStatus.FAILED and not self._retryable(i, s)
                for i, s in states.items()
            )
        ):
            records.set_marker(layout.FAILED_FAST)
            records.set_marker(layout.CANCEL_REQUESTED)
            cancelled = True
        if cancelled:
            for i, state in states.items():
                if not state.terminal:
                    jobs[i].cancel()
        else:
            result.launched = self._launch_more(latest, states, failures)
        result.cancelled = cancelled
        result.done = self._done(states, failures) and not result.launched
        return result

    def _retryable(self, index: int, state: JobState) -> bool:
        if state.status is not JobStatus.FAILED:
            return False
        allowed = (self.retries + 1) * (self.rounds + 1)
        if never_ran(state):  # its launcher died mid-launch: not one of the child's tries
            allowed += RELAUNCHES
        return state.attempt < allowed

    def is_final(self, index: int, state: JobState, cancelled: bool) -> bool:
        """Terminal, and no further attempt will follow (none left, or the batch stopped)."""
        return state.terminal and (cancelled or not self._retryable(index, state))

    def _launch_more(
        self, latest: dict[int, Ticket], states: dict[int, JobState], failures: dict[int, Any]
    ) -> list[int]:
        """Take tickets while slots are free: retries of failed children first, then the
        next inputs in order. Stops at the first ticket another driver took."""
        running = sum(1 for i in latest if not states.get(i, _PENDING).terminal)
        wanted = [
            (i, latest[i].attempt + 1) for i in sorted(latest) if self._retryable_now(i, states)
        ]
        wanted += [
            (i, 1) for i in range(self.records.total) if i not in latest and i not in failures
        ]
        tickets: list[Ticket] = []
        for index, attempt in wanted:
            if running >= self.limit or self.records.marker(layout.CANCEL_REQUESTED):
                break
            if attempt > 1:
                self._stage_retry(index, attempt)
            ticket = self.records.take_ticket(index, attempt)
            if ticket is None:
                break  # another driver is launching too: decide again next step
            tickets.append(ticket)
            running += 1
        # The tickets are taken in sequence (that bounds the children running); their
        # launches go together, each create-only per job id: a driver killed among them
        # leaves tickets whose children read SUBMITTING, and the next step launches those
        # (``step``), as it does for a driver killed between one ticket and its launch.
        # One at a time, a launch's API round trips made 24 children a second (issue 37).
        parallel(self._launch, tickets, LAUNCHERS)
        return [t.index for t in tickets]

    def _retryable_now(self, index: int, states: dict[int, JobState]) -> bool:
        state = states.get(index)
        return state is not None and self._retryable(index, state)

    def _launch(self, ticket: Ticket) -> None:
        handle = self.records.handle_for(ticket)
        record = self.records.public_handle(ticket) if self.records.backend_overlay else None
        try:
            launch_staged(handle, python_path=self.python_path, workdir=self.workdir, record=record)
        except KineticError:
            pass  # it reads Lost after the submit grace, then counts as a failed attempt

    def _stage_retry(self, index: int, attempt: int) -> None:
        """Stage attempt ``attempt`` from the verified call of the attempt before it,
        re-bound to the new job id (never unpickled here)."""
        group = self.records.group_id
        previous = child_job_id(group, index, attempt - 1)
        job_id = child_job_id(group, index, attempt)
        storage = self.records.storage
        try:
            with storage.open_write(
                layout.job_file(job_id, layout.PAYLOAD), create_only=True
            ) as fh:
                rebind_envelope(
                    storage,
                    layout.job_file(previous, layout.PAYLOAD),
                    fh,
                    kind="call",
                    job_id=previous,
                    new_job_id=job_id,
                    signing_key=self.records.signing_key,
                )
        except FileExistsError:
            pass  # another driver staged it

    def _done(self, states: dict[int, JobState], failures: dict[int, Any]) -> bool:
        cancelled = self.records.marker(layout.CANCEL_REQUESTED)
        for i in range(self.records.total):
            if i in failures:
                continue
            state = states.get(i)
            if state is None:
                return False
            if not state.terminal or (self._retryable(i, state) and not cancelled):
                return False
        return True


_PENDING = JobState(job_id="", status=JobStatus.PENDING)


def never_ran(state: JobState) -> bool:
    """The attempt was lost (or aborted) before its runner started: a driver died while
    launching it (the local supervisor was never confirmed, or nothing was launched at
    all). ``JobState.ran`` decides where it is known; where it is not (an end an older
    version recorded) the message's words decide, as they did before the flag."""
    if state.reason not in (Reason.ABORTED, Reason.LOST):
        return False
    if state.ran is not None:
        return not state.ran
    message = state.message or ""
    return state.reason == Reason.ABORTED or (
        "never ran" in message or "has no record of the job" in message
    )


def drive_batch(group_id: str, storage_uri: str) -> dict[str, Any]:
    """Drive a batch to its end (the detached driver job's function). Returns counts."""
    storage = open_storage(storage_uri)
    records = BatchRecords(read_manifest(storage, group_id), os.environ.get("KINETIC_SIGNING_KEY"))
    records.backend_overlay = pod_credentials(records.manifest["target"], os.environ)
    driver = Driver(records)
    result = StepResult()
    for _ in poll_ticks(interval=driver.interval(), timeout=None, describe=lambda: group_id):
        result = driver.step()
        if result.done:
            break
    counts: dict[str, int] = {}
    for state in result.states.values():
        counts[state.status.value] = counts.get(state.status.value, 0) + 1
    return counts


def driver_jobs(records: BatchRecords) -> list[JobHandle]:
    """The batch's driver jobs (one per round; a lost one may have had later attempts)."""
    found = []
    for number in range(records.rounds() + 1):
        key = DRIVER_KEY.format(group_id=records.group_id, round=number)
        attempt = 1
        while records.storage.exists(layout.job_file(keyed_id(key, attempt), layout.HANDLE)):
            found.append(load_handle(records.storage, keyed_id(key, attempt), records.signing_key))
            attempt += 1
    return found


def pod_credentials(target: dict[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """What the driver, running where ``env`` says, overrides in the batch's target: the
    backend's kind says (in a Kubernetes pod, on ``kubernetes`` and ``gke`` alike, the
    pod's service account: the submitter's kubeconfig is not there)."""
    kind: BackendKind = registry.backend_kind(target.get("backend"))
    return kind.driver_overlay(target, env)


def driver_target(target: dict[str, Any], signing_key: str | None) -> Target:
    stored = Target.from_stored({k: v for k, v in target.items() if k not in DRIVER_DROPS})
    return replace(stored, signing_key=signing_key, life_span=None, schedule_timeout=None)
