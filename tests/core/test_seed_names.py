"""Code written for the seed kinetic (issue 35 item 6): its names keep working with a
DeprecationWarning naming ours, or fail at once naming what to do; never silently."""

from __future__ import annotations

import pytest

import kinetic_core as kc
from tests.core import batch_helpers as h
from tests.core import jobfns


def test_an_on_status_change_callback_reading_value_still_sees_each_status(
    storage_uri: str,
) -> None:
    """kinetic's callbacks got a JobStatus and read ``s.value``: here the AttributeError
    was logged and the callback silently did nothing."""
    seen: list[str] = []
    job = kc.submit(jobfns.add, (1, 2))
    with pytest.warns(DeprecationWarning, match=r"use state\.status\.value"):
        assert job.result(timeout=60, on_status_change=lambda s: seen.append(s.value)) == 3
    assert seen and seen[-1] == "SUCCEEDED", seen


def test_the_old_handle_names_map_to_the_new_ones(storage_uri: str) -> None:
    batch = kc.submit_map(h.square_or_fail, [2], target=kc.Target(storage=storage_uri))
    batch.wait(timeout=90)
    job = batch.jobs[0]
    assert job is not None
    for old, new in (("k8s_name", "kubernetes_job_name"), ("image_uri", "image")):
        with pytest.warns(DeprecationWarning, match=rf"use JobHandle\.{new}"):
            assert getattr(job, old) == getattr(job, new)
    with pytest.warns(DeprecationWarning, match=r"use JobHandle\.index"):
        assert job.group_index == job.index == 0


def test_the_old_keywords_map_to_the_new_ones(storage_uri: str, tmp_path: object) -> None:
    job = kc.submit(jobfns.sleep, (60,))
    with pytest.warns(DeprecationWarning, match=r"use cancel\(wait=\)"):
        assert job.cancel(cleanup_timeout=30) is True
    assert job.status() is kc.JobStatus.CANCELLED
    with pytest.warns(DeprecationWarning, match=r"use cleanup\(storage=\)"):
        job.cleanup(k8s=True, gcs=False)  # the envelopes stay: gcs=False is storage=False
    assert kc.attach(job.job_id).state().status is kc.JobStatus.CANCELLED
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        job.cleanup(bogus=True)


def test_attach_batch_takes_poll_interval_and_says_it_has_no_use(storage_uri: str) -> None:
    batch = kc.submit_map(h.square_or_fail, [3], target=kc.Target(storage=storage_uri))
    with pytest.warns(DeprecationWarning, match="poll_interval=.*no use here"):
        again = kc.attach_batch(batch.group_id, poll_interval=5.0)
    assert again.results(timeout=90) == [9]
