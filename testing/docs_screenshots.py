"""The viewer's screenshots in ``docs/``: the demo session (our own generated data), light and dark.

``scripts/viewer-screenshots`` runs `main`, which serves the demo (``serve --demo`` on a
temporary store) and writes ``docs/viewer-light.png`` and ``docs/viewer-dark.png``. The
browser context fixes the locale, the time zone and the size, so the same code makes the same
pictures on any machine. tests/history_service/test_viewer.py makes them into a temporary
folder, so the way they are made cannot rot. Never point this at other data: what it writes
is committed.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

from history_service.cli.demo import DEMO_SESSION
from testing.browser import launch, missing_reason
from testing.servers import ServerProcess

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ViewportSize

__all__ = ["DOCS_DIR", "SCHEMES", "main", "make_screenshots"]

DOCS_DIR: Final = Path(__file__).resolve().parent.parent / "docs"
Scheme = Literal["light", "dark"]
SCHEMES: Final[dict[Scheme, str]] = {"light": "viewer-light.png", "dark": "viewer-dark.png"}
VIEWPORT: Final[ViewportSize] = {"width": 1000, "height": 720}
TIMEOUT_MS: Final = 60_000
# Shown in the find bar, so the pictures show a search too.
QUERY: Final = "items"
SCROLL_UP_A_LITTLE: Final = (
    "() => { const s = document.getElementById('scroller'); s.scrollTop = s.scrollHeight - s.clientHeight - 240; }"
)


def make_screenshots(browser: Browser, url: str, out: Path) -> dict[Scheme, Path]:
    """Photograph the demo session served at ``url`` in each colour scheme; the files, by scheme."""
    out.mkdir(parents=True, exist_ok=True)
    made: dict[Scheme, Path] = {}
    for scheme, name in SCHEMES.items():
        context = browser.new_context(
            viewport=VIEWPORT, color_scheme=scheme, locale="en-US", timezone_id="UTC", device_scale_factor=1
        )
        try:
            page = context.new_page()
            page.goto(f"{url}/viewer/?session={DEMO_SESSION}")
            page.wait_for_selector("html[data-ready='true']", timeout=TIMEOUT_MS)
            page.wait_for_selector("#status[data-state='live']", timeout=TIMEOUT_MS)
            page.fill("#find", QUERY)
            page.wait_for_selector("#timeline > .item[data-current]", timeout=TIMEOUT_MS)
            # Away from the bottom by a little, so the jump-to-end button shows as well.
            page.evaluate(SCROLL_UP_A_LITTLE)
            page.wait_for_selector("#jump:not([hidden])", timeout=TIMEOUT_MS)
            made[scheme] = out / name
            page.screenshot(path=str(made[scheme]))
        finally:
            context.close()
    return made


def main(argv: list[str] | None = None) -> int:
    """Serve the demo on a temporary store and write the screenshots into ``docs/`` (or the folder given)."""
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0]) if args else DOCS_DIR
    reason = missing_reason()
    if reason is not None:
        print(f"viewer-screenshots: {reason}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(f"sqlite:///{Path(tmp) / 'demo.db'}")
        server.start("--demo")
        try:
            with launch() as browser:
                for path in make_screenshots(browser, server.url, out).values():
                    print(path)
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
