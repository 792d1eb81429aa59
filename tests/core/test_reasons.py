"""Reasons are data: ``Reason`` members are the words kinetic stores, recovery asks
``.recoverable``, and a word this version does not know (an older or newer store, a
backend's own) stays a plain str that nothing chokes on."""

from __future__ import annotations

import json
import signal

import pytest

from kinetic_core import errors
from kinetic_core.backends.local import supervisor
from kinetic_core.control.recovery import recoverable_end
from kinetic_core.states import (
    RECOVERING,
    SUBMITTING,
    JobState,
    JobStatus,
    Reason,
    recoverable_reason,
)


def test_a_reason_is_its_word_in_comparisons_and_stored_json() -> None:
    assert Reason.LOST == "Lost" and {"Preempted": 1}[Reason.PREEMPTED] == 1
    assert json.dumps({"reason": Reason.DEADLINE_EXCEEDED}) == '{"reason": "DeadlineExceeded"}'
    assert type(str(Reason.ERROR)) is str and f"{Reason.QUEUED}" == "Queued"
    assert SUBMITTING is Reason.SUBMITTING and SUBMITTING == "Submitting"
    assert RECOVERING is Reason.RECOVERING and RECOVERING == "Recovering"


def test_exactly_preempted_and_lost_are_recoverable() -> None:
    assert {r for r in Reason if r.recoverable} == {Reason.PREEMPTED, Reason.LOST}
    assert recoverable_reason("Lost") and recoverable_reason(Reason.PREEMPTED)
    assert not recoverable_reason("NodeLost")  # a backend's word; the job reads Lost
    assert not recoverable_reason(None) and not recoverable_reason("SomethingNewer")
    assert Reason.of("SomethingNewer") == "SomethingNewer"
    assert type(Reason.of("SomethingNewer")) is str and Reason.of("Lost") is Reason.LOST


class _Ref:
    target: dict[str, object] = {"recover_on_exit_codes": [75]}


@pytest.mark.parametrize(
    ("reason", "exit_code", "expected"),
    [
        ("Lost", None, True),  # a plain str, as read from storage
        (Reason.PREEMPTED, 1, True),
        ("Error", 1, False),
        ("ReasonOfAnOlderStore", 1, False),  # unknown: not recoverable, no error
        ("ReasonOfAnOlderStore", 75, True),  # the exit-code policy still applies
        (None, None, False),
    ],
)
def test_recovery_asks_the_reason_and_tolerates_unknown_words(
    reason: str | None, exit_code: int | None, expected: bool
) -> None:
    state = JobState("j", JobStatus.FAILED, reason=reason, exit_code=exit_code)
    assert recoverable_end(_Ref(), state) is expected


def test_state_dicts_round_trip_and_old_ones_load() -> None:
    state = JobState("j", JobStatus.FAILED, reason=Reason.LOST, message="m", ran=False)
    data = state.to_dict()
    assert data["reason"] == "Lost" and type(data["reason"]) is str and data["ran"] is False
    assert JobState.from_dict(json.loads(json.dumps(data))) == state
    old = {k: v for k, v in data.items() if k != "ran"} | {"a_later_field": 1}
    loaded = JobState.from_dict(old)
    assert loaded.ran is None and loaded.reason is Reason.LOST
    odd = JobState.from_dict({"job_id": "j", "status": "PENDING", "reason": "ContainerCreating"})
    assert odd.reason == "ContainerCreating" and type(odd.reason) is str


def test_the_words_spelled_outside_states_are_members() -> None:
    """The supervisor (stdlib imports only) and ``errors`` (imports nothing of kinetic)
    spell their reasons; each must be a Reason."""
    words = [
        supervisor.describe_exit(signal.SIGKILL, None, 0)["reason"],
        supervisor.describe_exit(signal.SIGTERM, None, 0)["reason"],
        supervisor.describe_exit(0, None, 0)["reason"],
        supervisor.describe_exit(1 << 8, None, 0)["reason"],
        supervisor.describe_exit(signal.SIGTERM, "DeadlineExceeded", 5)["reason"],
        supervisor.describe_exit(signal.SIGTERM, "Cancelled", 0)["reason"],
    ]
    aborted = supervisor._not_started("Aborted", "the submitter did not confirm the launch")
    assert aborted["ran"] is False
    words.append(aborted["reason"])
    words += [
        e.reason for e in (errors.JobSetupError, errors.ImageMismatch, errors.RequirementsFailed)
    ]
    for word in words:
        assert isinstance(word, str)
        Reason(word)  # raises for a word that is no member
