"""The one retry policy for calls to foreign services; each caller says only which errors are transient.

Exponential backoff with full jitter, bounded both in attempts and in total time, declared
once as tenacity data (GCS storage and the Kubernetes client use it). Errors the predicate
calls permanent fail at once. Callers run ``policy.copy()(fn)`` (or ``policy.wraps``):
a copy per call keeps retry state out of threads that share one policy.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from tenacity import (
    Retrying,
    before_sleep_log,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

log = logging.getLogger(__name__)

STOP = stop_after_attempt(8) | stop_after_delay(120)
WAIT = wait_random_exponential(multiplier=0.2, max=10)


def transient_retry(is_transient: Callable[[BaseException], bool]) -> Retrying:
    """The policy: retry what ``is_transient`` accepts, re-raise the last error when it gives up."""
    return Retrying(
        retry=retry_if_exception(is_transient),
        wait=WAIT,
        stop=STOP,
        before_sleep=before_sleep_log(log, logging.WARNING),
        reraise=True,
    )


def reconnect_retry(
    is_transient: Callable[[BaseException], bool], give_up: Callable[[], bool]
) -> Retrying:
    """The same backoff for a long-lived stream (a Kubernetes watch): retries what
    ``is_transient`` accepts for as long as ``give_up()`` is false (its owner still wants
    it), since a watch is never done; permanent errors are re-raised at once."""
    return Retrying(
        retry=retry_if_exception(is_transient),
        wait=WAIT,
        stop=lambda _state: give_up(),
        before_sleep=before_sleep_log(log, logging.DEBUG),
        reraise=True,
    )
