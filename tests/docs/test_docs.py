"""Every Python example in the README and docs/ runs, page by page, as a reader would run
them one after the other (one namespace per page), with Sybil (issue 35, item 7).

Each page gets a fresh storage root (``KINETIC_STORAGE``) on the local backend and a
fresh working folder; ``kc`` is imported, as every page assumes. Names a block uses that
an earlier block of the page does not define come from an invisible block above it
(``<!-- invisible-code-block: python ... -->``: a function ``train``, a finished ``job``).
A block that needs what a test machine does not have (GKE, a
bucket, Airflow or Prefect, which tests/airflow and tests/prefect run for real) says so
just above it, where the reader sees it in the page's source:
``<!-- skip: next "needs a GKE cluster" -->``. Blocks that only show a signature or a
fragment are not Python blocks (``text``).
"""

from __future__ import annotations

import ast
import asyncio
import inspect
from collections.abc import Iterator
from pathlib import Path
from unittest import SkipTest

import pytest
from sybil import Example, Sybil
from sybil.evaluators.python import pad
from sybil.parsers.markdown import CodeBlockParser, SkipParser

import kinetic_core as kc
from tests.cleanup import kill_leftovers

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def evaluate(example: Example) -> None:
    """Run a Python block as a reader pastes it into ``python -m asyncio``: top-level
    ``await`` and ``async for`` included (the docs show the async twins that way)."""
    source = pad(example.parsed, example.line + example.parsed.line_offset)
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    code = compile(source, example.path, "exec", flags=flags, dont_inherit=True)
    if code.co_flags & inspect.CO_COROUTINE:
        asyncio.run(eval(code, example.namespace))
    else:
        exec(code, example.namespace)
    example.namespace.pop("__builtins__", None)


SYBIL = Sybil(
    parsers=[CodeBlockParser(language="python", evaluator=evaluate), SkipParser()],
    path=str(ROOT),
)


@pytest.fixture
def reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A reader's machine: an empty working folder and storage root, the local backend."""
    store = tmp_path / "store"
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("KINETIC_STORAGE", f"file://{store}")
    for name in ("KINETIC_SIGNING_KEY", "KINETIC_BACKEND", "KINETIC_OUTPUT_DIR"):
        monkeypatch.delenv(name, raising=False)
    yield work
    kill_leftovers(store)


#: Pages about an orchestrator run in its environment (make test-airflow, test-prefect):
#: Airflow and Prefect cannot share one.
NEEDS = {"airflow.md": "airflow.sdk", "prefect.md": "prefect.flows"}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_the_examples_of_the_page_run(page: Path, reader: Path) -> None:
    if page.name in NEEDS:
        pytest.importorskip(NEEDS[page.name], reason=f"{page.name} runs where it is installed")
    document = SYBIL.parse(page)
    document.namespace["kc"] = kc  # every page assumes `import kinetic_core as kc`
    for example in document.examples():
        try:
            example.evaluate()
        except SkipTest:
            continue  # a block marked skip: the comment above it says why
        except Exception as exc:
            raise AssertionError(f"{page.name}, line {example.line}: {exc!r}") from exc
