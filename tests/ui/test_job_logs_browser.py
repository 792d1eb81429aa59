"""A job's page in headless Chromium (issue 33): a recovered job is one page whose log
follows into the next attempt (item 4), and a long log opens on its tail in bounded parts,
with earlier parts on demand, search, download and timestamps (item 5)."""

from __future__ import annotations

from pathlib import Path

import kinetic_core as kc
from tests.browser import browser_page
from tests.ui import uifns
from tests.ui.serving import kinetic_ui

#: The page holds at most this many parts of 256 KiB (app.js MAX_PARTS).
SHOWN_CHARS = 3 * 256 * 1024
LINES = 40_000


def logs_text(page: object) -> str:
    return str(page.evaluate("() => document.getElementById('logs').textContent"))  # type: ignore[attr-defined]


def test_a_recovered_job_is_one_page_whose_log_follows_the_recovery(
    storage_uri: str, tmp_path: Path
) -> None:
    gate = tmp_path / "gate"
    target = kc.Target(storage=storage_uri, max_recoveries=1, recover_on_exit_codes=[75])
    job = kc.submit(
        uifns.recover_after_gate,
        (str(gate), str(tmp_path / "marks")),
        name="spot-train",
        target=target,
    )
    with kinetic_ui(storage_uri, tmp_path / "ui.log") as url, browser_page() as page:
        page.goto(f"{url}/jobs/{job.job_id}")
        page.locator("#logs", has_text="attempt one is running").wait_for()
        assert page.locator("#attempt-select").is_hidden()  # one attempt: nothing to pick
        gate.touch()  # attempt 1 exits 75; the page, open on attempt 1's id, follows on
        page.locator('#job-state[data-status="SUCCEEDED"]').wait_for()
        page.locator('#logs[data-attempt="2"]', has_text="attempt two picks up").wait_for()
        assert "attempt 1 ended; the job was recovered" in logs_text(page)
        assert page.locator("#attempt-select").is_visible()
        assert page.locator("#attempt-select option[data-attempt-option]").count() == 2
        page.locator('#timeline rect[data-attempt="2"]').first.wait_for()
        assert page.locator('#timeline rect[data-attempt="1"]').count() > 0

        page.select_option("#attempt-select", "1")
        page.locator('#logs[data-attempt="1"][data-done]').wait_for()
        shown = logs_text(page)
        assert "attempt one asks for a restart" in shown and "attempt two" not in shown

        second = job.state().job_id
        assert second != job.job_id
        page.goto(f"{url}/")
        page.locator(f'#jobs-table tr[data-job-id="{job.job_id}"]').wait_for()
        page.wait_for_function(
            "() => document.querySelector('#jobs-table tbody').dataset.drawn === 'api'"
        )
        assert page.locator(f'#jobs-table tr[data-job-id="{job.job_id}"]').count() == 1
        assert page.locator(f'#jobs-table tr[data-job-id="{second}"]').count() == 0


def test_a_long_log_opens_on_its_tail_and_stays_bounded(storage_uri: str, tmp_path: Path) -> None:
    job = kc.submit(uifns.numbered_lines, (LINES,), target=kc.Target(storage=storage_uri))
    stamped = kc.submit(uifns.stamped_lines, (5,), target=kc.Target(storage=storage_uri))
    job.wait(timeout=120)
    stamped.wait(timeout=120)
    whole = job.logs()
    last = f"line {LINES - 1:06d}"
    with kinetic_ui(storage_uri, tmp_path / "ui.log") as url, browser_page() as page:
        page.goto(f"{url}/jobs/{job.job_id}")
        page.locator("#logs[data-done]").wait_for()
        shown = logs_text(page)
        assert last in shown and "line 000000" not in shown and len(shown) <= SHOWN_CHARS
        earlier = page.locator("#log-earlier")
        assert earlier.is_visible()
        while earlier.is_visible():
            before = page.get_attribute("#logs", "data-first-part")
            earlier.click()
            page.wait_for_function(
                f"() => document.getElementById('logs').dataset.firstPart !== '{before}'"
            )
            assert len(logs_text(page)) <= SHOWN_CHARS  # the DOM stays bounded
        shown = logs_text(page)
        assert shown.startswith("line 000000") and last not in shown
        assert page.locator("#log-later").is_visible()

        page.fill("#log-search", "LINE 031337")
        page.click("#log-search-form button")
        hits = page.locator("#log-hits button.hit")
        hits.first.wait_for()
        assert hits.count() == 1
        hits.first.click()
        page.locator("#log-hit").wait_for()
        assert page.inner_text("#log-hit").startswith("line 031337")

        page.click("#log-later")  # back to the end
        page.locator("#logs", has_text=last).wait_for()
        download = page.get_attribute("#log-download", "href")
        assert download is not None
        response = page.request.get(f"{url}{download}")
        assert response.ok and response.text() == whole

        page.goto(f"{url}/jobs/{stamped.job_id}")
        page.locator("#logs[data-done] span.ts").first.wait_for()
        assert page.locator("#logs span.ts").count() == 5
        assert page.locator("#times-toggle").is_visible()
        page.uncheck("#log-times")
        assert page.locator("#logs span.ts").first.is_hidden()
        assert "step 4" in logs_text(page)
