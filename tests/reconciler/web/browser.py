"""Headless Chromium from the system package (Debian's ``chromium``), driven by Playwright.

Never a browser downloaded at test time: ``playwright install`` is not used. A machine without
``/usr/bin/chromium`` fails the browser tests with that reason (``make test`` installs it)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

CHROMIUM = Path(os.environ.get("KDISPATCH_CHROMIUM", "/usr/bin/chromium"))
ARGS = [
    "--headless",
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@asynccontextmanager
async def page() -> AsyncIterator[Any]:
    if not CHROMIUM.exists():
        raise AssertionError(
            f"no browser at {CHROMIUM}: install Debian's chromium (`apt-get install -y chromium`; "
            "`make test` does it when it is missing) or point KDISPATCH_CHROMIUM at one"
        )
    try:
        from playwright.async_api import async_playwright
    except ImportError as err:
        raise AssertionError(f"playwright is not installed ({err}): pip install -e '.[test]'") from None
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            context = await browser.new_context(viewport={"width": 1360, "height": 900})
            yield await context.new_page()
        finally:
            await browser.close()
