"""Headless Chromium for the browser tests: Debian's ``chromium`` (``make chromium``
installs it) driven by Playwright from PyPI, never a browser Playwright downloads."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

#: The viewport of every page (and so of the docs' screenshots: small PNGs).
VIEWPORT = {"width": 1200, "height": 800}


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("Debian's chromium is not installed: run `make chromium` (apt-get).")
    return found


#: A phone's viewport (CSS pixels), for the pages' narrow layout.
PHONE = {"width": 390, "height": 844}


@contextmanager
def browser_page(viewport: dict[str, int] | None = None) -> Iterator[Any]:
    """A page of a fresh headless Chromium (closed afterwards), ``VIEWPORT`` unless told."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium(), headless=True)
        try:
            page = browser.new_page(viewport=viewport or VIEWPORT)
            page.set_default_timeout(60_000)
            yield page
        finally:
            browser.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_serving(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float) -> None:
    """Until ``url`` answers at all (any HTTP status); fails with the server's output if
    it exits first or never answers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"server exited ({proc.returncode}):\n{log.read_text()[-4000:]}")
        try:
            urllib.request.urlopen(url, timeout=5).close()
            return
        except urllib.error.HTTPError:
            return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"{url} not serving after {timeout}s:\n{log.read_text()[-4000:]}")


@contextmanager
def serving(
    argv: list[str], env: dict[str, str], log: Path, port: int, health: str, timeout: float
) -> Iterator[str]:
    """The base URL of the server ``argv`` starts on 127.0.0.1:``port`` (its own process
    group, output in ``log``) once ``health`` answers; stopped on leaving."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=out, env=env, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_serving(f"{url}{health}", proc, log, timeout=timeout)
        yield url
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group, SIGKILL if it lingers."""
    if proc.poll() is None:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


def screenshot(page: Any, name: str) -> None:
    """``docs/assets/dashboard-NAME.png`` style screenshots, only when KINETIC_SCREENSHOTS
    names the folder (``make screenshots``); the docs keep the committed ones."""
    folder = os.environ.get("KINETIC_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"dashboard-{name}.png"))
