"""What the pages say reads true and as written (issue 33): a job's own text cannot turn
the page's text around (an unterminated right-to-left override in a name, message, tag or
description is isolated with ``<bdi>``, so "exit code 1" after it reads as written), and a
job with no price table says so rather than "cost None"."""

from __future__ import annotations

import html
import re

from starlette.testclient import TestClient

import kinetic_core as kc
from kinetic_core.ui import create_app
from tests.core import jobfns

RLO = "\u202e"


def _shown_outside_isolation(page: str) -> str:
    """The text of the page's body that is not isolated: every ``<bdi>`` and ``<pre>`` (a
    block: its own bidi paragraphs) taken out, then every tag (an attribute is no text
    the page's lines are made of)."""
    body = page.split("<main>", 1)[1].split("</main>", 1)[0]
    body = re.sub(r"<(bdi|pre)\b[^>]*>.*?</\1>", "", body, flags=re.S)
    return html.unescape(re.sub(r"<[^>]*>", "", body))


def test_user_text_is_isolated_on_the_jobs_and_job_pages(storage_uri: str) -> None:
    job = kc.submit(
        jobfns.fail,
        (f"{RLO}flipped",),
        name=f"name{RLO}x",
        tags={"team": f"ml{RLO}"},
        description=f"about{RLO}it",
    )
    job.wait(timeout=60)
    client = TestClient(create_app(storage_uri))
    for path in ("/", f"/jobs/{job.job_id}"):
        page = client.get(path).text
        assert RLO in html.unescape(page), path  # shown, not dropped
        assert RLO not in _shown_outside_isolation(page), path


def test_a_job_without_a_price_table_says_so_not_cost_none(storage_uri: str) -> None:
    """Issue 33, item 7: the usage table showed "cost None" and "currency None"."""
    job = kc.submit(jobfns.add, (1, 2))
    job.wait(timeout=60)
    page = TestClient(create_app(storage_uri)).get(f"/jobs/{job.job_id}").text
    usage = page.split('<div id="usage">', 1)[1].split("</div>", 1)[0]
    assert "None" not in usage
    assert "no price table is set" in usage and "KINETIC_PRICES" in usage
