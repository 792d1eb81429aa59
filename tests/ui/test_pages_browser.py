"""The jobs list and a job's page read well (issue 33, item 7), in headless Chromium over
``kinetic ui``: duration and ended columns that sort, a 300-character name that wraps, a
phone's 390 px without horizontal scrolling, a running job's elapsed time, a failure's
traceback once, no empty log box, a bad filter that keeps the form, a favicon."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import kinetic_core as kc
from tests.browser import PHONE, browser_page
from tests.core import jobfns
from tests.ui import uifns
from tests.ui.serving import kinetic_ui

LONG_NAME = "a_very_long_experiment_name_" * 11  # 308 characters, nowhere to break


@dataclass
class Store:
    url: str
    gate: Path
    long: kc.JobHandle
    slow: kc.JobHandle
    failed: kc.JobHandle
    silent: kc.JobHandle
    running: kc.JobHandle


@pytest.fixture
def store(storage_uri: str, tmp_path: Path) -> Iterator[Store]:
    target = kc.Target(storage=storage_uri)
    gate = tmp_path / "gate"
    long = kc.submit(jobfns.add, (1, 2), name=LONG_NAME, target=target)
    slow = kc.submit(jobfns.sleep, (1.5, "slept"), name="slow", target=target)
    failed = kc.submit(jobfns.fail, ("learning rate too high",), name="evaluate", target=target)
    silent = kc.submit(jobfns.add, (2, 2), name="silent", target=target)
    for job in (long, slow, failed, silent):
        job.wait(timeout=60)
    running = kc.submit(uifns.gated_ticks, (str(gate), 2, 0.1), name="fine-tune", target=target)
    with kinetic_ui(storage_uri, tmp_path / "ui.log") as url:
        yield Store(url, gate, long, slow, failed, silent, running)
        gate.touch()
        running.wait(timeout=60)


def no_horizontal_scroll(page: object) -> bool:
    return bool(
        page.evaluate(  # type: ignore[attr-defined]
            "() => document.documentElement.scrollWidth <= window.innerWidth"
        )
    )


def test_jobs_list_sorts_by_duration_and_a_long_name_wraps(store: Store) -> None:
    with browser_page() as page:
        page.goto(f"{store.url}/")
        page.locator(f'#jobs-table tr[data-job-id="{store.running.job_id}"]').wait_for()
        assert no_horizontal_scroll(page)  # a 308-character name wraps in its cell
        heads = page.locator("#jobs-table thead th").all_inner_texts()
        assert "Ended" in heads and "Duration" in heads
        page.click('#jobs-table a.sort[data-sort="duration"]')
        page.wait_for_url("**sort=duration**")
        page.wait_for_function(
            "() => document.querySelector('#jobs-table tbody').dataset.drawn === 'api'"
        )
        ids = page.locator("#jobs-table tr[data-job-id]").evaluate_all(
            "rows => rows.map(r => r.dataset.jobId)"
        )
        ended_ids = [i for i in ids if i != store.running.job_id]  # it runs: its time grows
        assert ended_ids[0] == store.slow.job_id  # 1.5 s: the longest ended job
        ended = page.locator(f'#jobs-table tr[data-job-id="{store.slow.job_id}"] td').nth(5)
        assert ended.locator("time").count() == 1
        duration = page.locator(f'#jobs-table tr[data-job-id="{store.slow.job_id}"] td.duration')
        assert re.fullmatch(r"\d+\.\ds", duration.inner_text())
        icon = page.get_attribute('link[rel="icon"]', "href")
        assert icon and page.request.get(f"{store.url}{icon}").ok
        assert page.request.get(f"{store.url}/favicon.ico").ok


def test_a_job_page_elapsed_time_traceback_once_and_no_empty_log_box(store: Store) -> None:
    with browser_page() as page:
        page.goto(f"{store.url}/jobs/{store.running.job_id}")
        page.locator("#elapsed", has_text=re.compile(r"running for \d")).wait_for()

        page.goto(f"{store.url}/jobs/{store.failed.job_id}")
        page.locator("#logs[data-done]").wait_for()
        outside_log = page.evaluate(
            "() => { const c = document.querySelector('main').cloneNode(true);"
            " c.querySelector('#logs').remove(); return c.innerText; }"
        )
        assert outside_log.count("Traceback (most recent call last)") == 1
        assert outside_log.count("learning rate too high") <= 2  # the state line, the traceback
        assert page.inner_text("#elapsed").startswith("ran ")

        page.goto(f"{store.url}/jobs/{store.silent.job_id}")
        page.locator("#logs[data-done]").wait_for()
        box = page.locator("#logs").bounding_box()
        assert box is not None and box["height"] < 80, box  # no empty 360 px box


def test_a_bad_filter_keeps_the_form_and_says_what_is_wrong(store: Store) -> None:
    with browser_page() as page:
        response = page.goto(f"{store.url}/?since=yesterday-ish&name=train")
        assert response is not None and response.status == 400
        assert page.input_value('#filters input[name="since"]') == "yesterday-ish"
        assert page.input_value('#filters input[name="name"]') == "train"
        assert "is not a time" in page.inner_text("#filter-error")
        response = page.goto(f"{store.url}/usage?since=never")
        assert response is not None and response.status == 400
        assert page.input_value('#filters input[name="since"]') == "never"
        assert page.locator("#filter-error").is_visible()


def test_every_page_fits_a_phone(store: Store) -> None:
    with browser_page(PHONE) as page:
        for path in (
            "/",
            f"/jobs/{store.long.job_id}",
            f"/jobs/{store.failed.job_id}",
            f"/jobs/{store.running.job_id}",
            "/batches",
            "/usage",
        ):
            page.goto(f"{store.url}{path}")
            page.wait_for_load_state("networkidle")
            assert no_horizontal_scroll(page), path
