"""A job's own text cannot turn the page's text around (issue 33): an unterminated
right-to-left override in a name, message, tag or description is isolated (``<bdi>``),
so the words after it ("exit code 1") read as written."""

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
