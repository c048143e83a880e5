"""Debian's chromium, driven by Playwright through ``executable_path``: the browser tests' one way in.

`scripts/with-chromium` sets ``HISTORY_TEST_CHROMIUM``; without it, a ``chromium`` on PATH is used.
Nothing here downloads a browser. Screenshots go to the ignored ``test-output/`` folder.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

__all__ = ["OUTPUT_DIR", "checked_page", "chromium_path", "launch", "missing_reason", "screenshot"]

OUTPUT_DIR: Final = Path(__file__).resolve().parent.parent / "test-output"

# As root in a container chromium needs --no-sandbox; the rest keep it off this closed network.
_ARGS: Final = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def chromium_path() -> str | None:
    """The chromium binary to drive, or ``None`` when this machine has none."""
    return os.environ.get("HISTORY_TEST_CHROMIUM") or shutil.which("chromium")


def missing_reason() -> str | None:
    """Why the browser tests cannot run here, or ``None`` when they can."""
    if chromium_path() is None:
        return "no chromium: HISTORY_TEST_CHROMIUM is not set and chromium is not on PATH (scripts/with-chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (the dev extra)"
    return None


@contextmanager
def launch(*extra_args: str) -> Iterator[Browser]:
    """A headless chromium for one test module."""
    from playwright.sync_api import sync_playwright

    path = chromium_path()
    assert path is not None, missing_reason()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, headless=True, args=[*_ARGS, *extra_args])
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def checked_page(browser: Browser, name: str, **options: Any) -> Iterator[Page]:
    """A page in a fresh 900x400 context: no uncaught error may happen in it or in any other page of the
    context, and it is photographed as ``name``. ``options`` go to the context (a locale, a time zone)."""
    context = browser.new_context(**{"viewport": {"width": 900, "height": 400}, **options})
    errors: list[str] = []
    context.on("page", lambda page: page.on("pageerror", lambda exc: errors.append(str(exc))))
    opened = context.new_page()
    try:
        yield opened
        assert errors == [], f"uncaught errors in the page: {errors}"
    finally:
        screenshot(opened, name)
        context.close()


def screenshot(page: Page, name: str) -> Path:
    """Save a full-page screenshot of ``page`` as ``test-output/<name>.png``."""
    OUTPUT_DIR.mkdir(exist_ok=True)
    path = OUTPUT_DIR / (re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") + ".png")
    page.screenshot(path=str(path), full_page=True)
    return path
