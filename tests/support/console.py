"""What the console's browser tests run against: the service with the demo fake model, a
function whose description and output carry script and markup payloads, one that reports
progress, and an MCP server whose tool descriptions carry the payloads too."""

from __future__ import annotations

import asyncio
import os
import re
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from playwright.async_api import Page, Route, expect

from app.chat.fake_model import FakeModelApp
from app.main import create_app
from app.tools.builtin import roll_dice
from app.tools.progress import Progress
from app.tools.registry import FunctionRegistry
from tests.support.apps import ADMIN_KEY, make_settings
from tests.support.browser import Tab
from tests.support.mcp_demo import McpDemoServer
from tests.support.screenshots import DOCS_SCREENSHOTS, stamped
from tests.support.servers import ThreadedServer

# Each run screenshots every page; the pictures in docs/console/ are replaced only when asked
# (TOOLGATE_UPDATE_SCREENSHOTS=1), so a test run leaves the checkout as it found it.
SCREENSHOTS = (
    DOCS_SCREENSHOTS
    if os.environ.get("TOOLGATE_UPDATE_SCREENSHOTS") == "1"
    else Path(tempfile.gettempdir()) / "toolgate-console-screenshots"
)
# Each payload sets window.pwned if it ever runs as script or markup.
HOSTILE = (
    '<script>window.pwned = "script"</script>'
    '<img src="x" onerror="window.pwned = \'img\'">'
    "<a href=\"javascript:window.pwned='link'\">click</a>"
)

registry = FunctionRegistry()
registry.register(roll_dice, tool_id="rolldice", tags=["games"])


@registry.register(tool_id="hostile", tags=["games"])
def hostile_echo(text: str) -> str:
    """<img src="x" onerror="window.pwned = 'description'"><b>Echo</b> the text back."""
    return f"{HOSTILE} {text}"


@registry.register(tool_id="count-slowly", tags=["demo"])
async def count_slowly(count: int) -> AsyncIterator[Progress | str]:
    """Count to `count`, reporting each step.

    Args:
        count: How far to count.
    """
    for step in range(1, count + 1):
        yield Progress(f"counted {step} of {count}", step / count)
    yield f"counted to {count}"


OTHER_CALLS = {"count_slowly": '{"count": 3}'}
# A user message "call NAME {ARGUMENTS}" gets exactly that call, offered or not (a scripted run
# chooses each chat's tools and failures; an unknown name is the model's mistake to record).
CALL = re.compile(r"^call (\S+) (\{.*\})$")
# An OpenAPI document with an operation that converts and one that is skipped.
SHOP = {
    "openapi": "3.1.0",
    "info": {"title": "Shop", "version": "1"},
    "servers": [{"url": "https://shop.example.com"}],
    "paths": {
        "/orders/{order_id}": {
            "get": {
                "operationId": "getOrder",
                "parameters": [
                    {
                        "name": "order_id",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string"},
                    }
                ],
            }
        },
        "/upload": {
            "post": {
                "operationId": "upload",
                "requestBody": {
                    "content": {"application/octet-stream": {"schema": {"format": "binary"}}}
                },
            }
        },
    },
}

# A name a model may make up: it reaches run records and /usage as the call's name.
HOSTILE_NAME = "<img/src=x/onerror=window.pwned='name'>"


class ConsoleModel(FakeModelApp):
    """The demo fake model (it calls roll_dice), except that a user message naming another
    offered function in `OTHER_CALLS` gets a call of that one, with its arguments."""

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request.get("messages") or [{}]
        offered = {t["function"]["name"] for t in request.get("tools") or []}
        said = str(messages[-1].get("content")) if messages[-1].get("role") == "user" else ""
        asked = CALL.match(said.strip())
        if asked:  # offered to the fake only, so that it makes the call
            offered_too = [*(request.get("tools") or []), {"function": {"name": asked[1]}}]
            other = FakeModelApp(tool=asked[1], arguments=asked[2], calls=1, latency_s=0)
            return other.answer({**request, "tools": offered_too})
        for name, arguments in OTHER_CALLS.items():
            if name in offered and name in said:
                other = FakeModelApp(tool=name, arguments=arguments, calls=1, latency_s=0)
                return other.answer(request)
        return super().answer(request)


@dataclass(frozen=True)
class ConsoleService:
    url: str
    model_url: str


@contextmanager
def console_service(**overrides: Any) -> Iterator[ConsoleService]:
    """The service on a real socket, its model the demo fake (`scripts/run --fake-model`);
    `overrides` are settings."""
    model = ThreadedServer(
        ConsoleModel(tool="roll_dice", arguments='{"d": 6}', calls=1, latency_s=0)
    ).start()
    settings = make_settings(openai_base_url=f"{model.url}/v1", openai_api_key="fake", **overrides)
    service = ThreadedServer(create_app(settings, registry=registry), lifespan="on").start()
    try:
        yield ConsoleService(service.url, model.url)
    finally:
        service.stop()
        model.stop()


def hostile_mcp() -> McpDemoServer:
    """An MCP server (streamable HTTP, not started) whose tool's title and description carry
    the payloads, as its output does."""
    server = MCPServer("hostile")

    @server.tool(title=HOSTILE, description=f"{HOSTILE} Echo the text back.")
    def echo(text: str) -> str:
        return f"{HOSTILE} {text}"

    return McpDemoServer("streamable-http", server)


# What the browser tests share: pictures, signing in, a new tenant, what a page must not show.


async def shot(page: Page, name: str) -> None:
    """The page as a PNG stamped with the navigation it shows (who is signed in, which links):
    tests/api/test_console.py checks the committed pictures against the console's pages."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    png = await page.screenshot(full_page=True)
    role = await page.evaluate(
        "JSON.parse(sessionStorage.getItem('toolgate.console.credential') || 'null')?.role ?? null"
    )
    nav = await page.locator("#nav a").all_inner_texts()
    (SCREENSHOTS / f"{name}.png").write_bytes(stamped(png, {"role": role, "nav": nav}))


async def sign_in(page: Page, key: str) -> None:
    """With the keyboard only: the field has focus on arrival, Enter submits."""
    await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    await expect(page.get_by_label("Key or token")).to_be_focused()
    await page.keyboard.type(key)
    await page.keyboard.press("Enter")


def unexpected(tab: Tab) -> list[str]:
    """Errors other than the browser's note on an answered 4xx (the console's probes for pages
    of newer services answer 404, and a wrong key 401, on purpose)."""
    return [e for e in tab.errors if "Failed to load resource" not in e]


async def unlabelled(page: Page) -> list[str]:
    """The page's visible controls that have no name: no label, no aria-label, no text."""
    names: list[str] = await page.evaluate(
        """() => [...document.querySelectorAll('input, select, textarea, button')]
        .filter(c => !c.hidden && !c.closest('[hidden]'))
        .filter(c => !(c.labels && c.labels.length) && !c.getAttribute('aria-label')
                     && !(c.tagName === 'BUTTON' && c.textContent.trim()))
        .map(c => c.outerHTML)"""
    )
    return names


async def new_tenant(page: Page, service: ConsoleService, tenant_id: str) -> None:
    """As the admin: create the tenant, then sign in with the key shown once."""
    await page.goto(f"{service.url}/console")
    await sign_in(page, ADMIN_KEY)
    await expect(page.get_by_role("heading", name="Tenants")).to_be_visible()
    await page.get_by_label("Tenant id").fill(tenant_id)
    await page.get_by_role("button", name="Create tenant").click()
    await expect(page.get_by_label(f"The key of {tenant_id}: shown only now")).to_have_value(
        re.compile(r"^tg_")
    )
    await page.get_by_role("button", name=f"Sign in as {tenant_id}").click()
    await expect(page.get_by_role("heading", name="Tools")).to_be_visible()


class Held:
    """Requests a test holds (`page.route(pattern, held.hold)`) and answers when it says."""

    def __init__(self) -> None:
        self.routes: list[Route] = []
        self._arrived = asyncio.Event()

    async def hold(self, route: Route) -> None:
        self.routes.append(route)
        self._arrived.set()

    async def arrival(self, bound_s: float = 10) -> Route:
        """The next request held (waited for at most `bound_s`)."""
        async with asyncio.timeout(bound_s):
            await self._arrived.wait()
        self._arrived.clear()
        return self.routes[-1]
