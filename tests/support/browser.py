"""A real headless browser (Debian's chromium, driven by Playwright) on a page of the service:
every request off the service's own origin is recorded and cut, console errors are kept."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit

import pytest
from playwright.async_api import ConsoleMessage, Page, Route, async_playwright

CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium")
# As Debian's chromium runs headless as root with no network: no sandbox, no background calls.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


class Tab:
    """A browser page that may reach only the service (and the origins in `also`): anything
    else is recorded and cut."""

    def __init__(self, base: str, also: tuple[str, ...] = ()) -> None:
        self.base = urlsplit(base).netloc
        self.origins = {self.base, *(urlsplit(url).netloc for url in also)}
        self.cut: list[str] = []
        self.errors: list[str] = []
        self.requests: list[str] = []

    async def route(self, route: Route) -> None:
        url = route.request.url
        self.requests.append(f"{route.request.method} {url}")
        if urlsplit(url).netloc in self.origins or url.startswith("data:"):
            await route.continue_()
        else:
            self.cut.append(url)
            await route.abort("internetdisconnected")

    def console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(f"console: {message.text}")


@asynccontextmanager
async def browser_tab(
    base: str, *, width: int = 1400, height: int = 1800, also: tuple[str, ...] = ()
) -> AsyncIterator[tuple[Page, Tab]]:
    if CHROMIUM is None:
        if os.environ.get("TOOLGATE_REQUIRE_BROWSER"):  # CI installs it: missing is a failure
            pytest.fail("chromium is required (TOOLGATE_REQUIRE_BROWSER) but not installed")
        pytest.skip("Debian's chromium is not installed: apt-get install chromium (.ci/run does)")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = await browser.new_context(viewport={"width": width, "height": height})
            tab = Tab(base, also)
            await context.route("**/*", tab.route)
            page = await context.new_page()
            page.on("console", tab.console)
            page.on("pageerror", lambda error: tab.errors.append(f"page error: {error}"))
            yield page, tab
        finally:
            await browser.close()
