"""A finished batch's page stays put (issue 33): it reloaded every ~2 s for ever, closing
the failed child one had opened. Headless Chromium over ``kinetic ui``."""

from __future__ import annotations

from tests.browser import browser_page
from tests.ui.test_dashboard_browser import Dashboard, dashboard  # noqa: F401 (the fixture)

#: Longer than a few of the page's refresh ticks (2 s): a page that reloads has by then.
WATCH_MS = 7000


def test_a_finished_batch_page_does_not_reload(dashboard: Dashboard) -> None:  # noqa: F811
    with browser_page() as page:
        page.goto(f"{dashboard.url}/batches/{dashboard.batch.group_id}")
        failed = page.locator("details.failed").first
        failed.locator("summary").click()
        page.evaluate("window.kineticStayed = true")  # gone if the page reloads
        page.wait_for_timeout(WATCH_MS)
        assert page.evaluate("window.kineticStayed === true")
        assert failed.evaluate("d => d.open")
