"""/docs and /redoc render in a real headless browser with the network cut: their assets come
from the service itself, every operation is listed, and the console shows no error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.main import create_app
from tests.support import functions
from tests.support.apps import http_client, make_settings, running_app
from tests.support.browser import browser_tab
from tests.support.servers import ThreadedServer

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def service() -> Iterator[str]:
    app = create_app(make_settings(), registry=functions.registry)
    server = ThreadedServer(app, lifespan="on").start()
    yield server.url
    server.stop()


def _operations(base: str) -> list[tuple[str, str, str]]:
    spec = httpx.get(f"{base}/openapi.json").json()
    return [
        (method.upper(), path, operation["operationId"])
        for path, item in spec["paths"].items()
        for method, operation in item.items()
    ]


async def test_swagger_ui_lists_every_operation_offline(service: str, tmp_path: Path) -> None:
    operations = _operations(service)
    async with browser_tab(service) as (page, tab):
        await page.goto(f"{service}/docs", wait_until="networkidle")
        await page.wait_for_selector(".opblock", timeout=15_000)
        shown = await page.eval_on_selector_all(
            ".opblock",
            """blocks => blocks.map(b => [
            b.querySelector('.opblock-summary-method').textContent.trim(),
            b.querySelector('.opblock-summary-path').getAttribute('data-path')])""",
        )
        await page.screenshot(path=str(tmp_path / "docs.png"), full_page=True)
        title = await page.title()
    assert (tmp_path / "docs.png").stat().st_size > 50_000  # a rendered page, not a blank one
    assert sorted(map(tuple, shown)) == sorted((method, path) for method, path, _ in operations)
    assert title == "toolgate - Swagger UI"
    assert (tab.cut, tab.errors) == ([], [])


async def test_redoc_lists_every_operation_offline(service: str, tmp_path: Path) -> None:
    operations = _operations(service)
    async with browser_tab(service) as (page, tab):
        await page.goto(f"{service}/redoc", wait_until="networkidle")
        await page.wait_for_selector("[data-section-id^='operation/']", timeout=15_000)
        sections = await page.eval_on_selector_all(
            "[data-section-id^='operation/']",
            "nodes => nodes.map(n => n.getAttribute('data-section-id'))",
        )
        await page.screenshot(path=str(tmp_path / "redoc.png"))
    assert (tmp_path / "redoc.png").stat().st_size > 50_000
    assert sorted(set(sections)) == sorted(f"operation/{op}" for _, _, op in operations)
    assert (tab.cut, tab.errors) == ([], [])


async def test_docs_assets_are_served_locally_and_cached() -> None:
    async with (
        running_app(make_settings(), functions.registry) as app,
        http_client(app) as client,
    ):
        page = (await client.get("/docs")).text
        assert "cdn" not in page.lower() and "/docs/assets/swagger-ui-bundle.js" in page
        redoc = (await client.get("/redoc")).text
        assert "fonts.googleapis" not in redoc and "/docs/assets/redoc.standalone.js" in redoc
        script = await client.get("/docs/assets/swagger-ui-bundle.js")
        assert script.status_code == 200 and len(script.content) > 500_000
        assert script.headers["cache-control"] == "public, max-age=86400"
        # Metrics and the access log name routes, never raw paths: the assets share one label.
        metrics = (await client.get("/metrics")).text
        assert 'route="/docs/assets",status="200"' in metrics
        assert 'route="/docs",status="200"' in metrics
        assert 'route="unmatched",status="200"' not in metrics
