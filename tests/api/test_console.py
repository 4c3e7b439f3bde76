"""/console is served by the service: a page and local assets under a strict
Content-Security-Policy, no inline script, no markup sinks in its scripts, nothing outside its
directory; its pictures in docs/ show the pages its navigation offers now."""

from __future__ import annotations

import re

import httpx
import pytest

from app.api.console import CONSOLE
from tests.support import functions
from tests.support.apps import http_client, make_settings, running_app
from tests.support.screenshots import DOCS_SCREENSHOTS, nav_pages, nav_titles, stamp_of

SCRIPTS = sorted((CONSOLE / "assets").rglob("*.js"))
# Ways a string becomes markup or code in a page: the console never uses one.
SINKS = re.compile(
    r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|"
    r"setTimeout\(\s*['\"`]|DOMParser|createContextualFragment|srcdoc"
)


async def test_the_page_and_its_assets_carry_the_policy() -> None:
    async with (
        running_app(make_settings(), functions.registry) as app,
        http_client(app) as client,
    ):
        for path in ("/console", "/console/"):
            page = await client.get(path)
            assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
            policy = page.headers["content-security-policy"]
            assert "script-src 'self'" in policy and "connect-src 'self'" in policy
            assert "unsafe" not in policy and "default-src 'none'" in policy
            assert page.headers["x-content-type-options"] == "nosniff"
            assert page.headers["cache-control"] == "no-store"
        assert '<script type="module" src="/console/assets/main.js"></script>' in page.text
        for script in SCRIPTS:
            served = await client.get(f"/console/assets/{script.relative_to(CONSOLE / 'assets')}")
            assert served.status_code == 200, script
            assert served.headers["content-type"].startswith("text/javascript")
            assert served.headers["content-security-policy"] == policy
        metrics = (await client.get("/metrics")).text
        assert 'route="/console/assets",status="200"' in metrics
        assert 'route="/console",status="200"' in metrics


async def test_head_answers_as_get_does_without_a_body() -> None:
    async with (
        running_app(make_settings(), functions.registry) as app,
        http_client(app) as client,
    ):
        for path in ("/console", "/console/", "/console/assets/main.js"):
            page = await client.get(path)
            head = await client.head(path)
            assert head.status_code == 200, path
            assert head.content == b""
            assert head.headers["content-type"] == page.headers["content-type"]
            assert (
                head.headers["content-security-policy"] == page.headers["content-security-policy"]
            )
            assert head.headers["content-length"] == str(len(page.content))


def test_no_inline_script_and_no_markup_sinks() -> None:
    html = (CONSOLE / "index.html").read_text()
    assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", html) == []
    assert " style=" not in html and " on" not in re.sub(r"<[^>]*content=[^>]*>", "", html)
    assert len(SCRIPTS) >= 10
    found = {str(s.relative_to(CONSOLE)): SINKS.findall(s.read_text()) for s in SCRIPTS}
    assert {name: sinks for name, sinks in found.items() if sinks} == {}


async def test_behind_a_proxy_prefix_the_page_names_its_assets_there() -> None:
    async with running_app(make_settings(), functions.registry) as app:
        transport = httpx.ASGITransport(app=app, root_path="/gate")
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            page = await client.get("/console")
    assert 'content="/gate"' in page.text and 'src="/gate/console/assets/main.js"' in page.text


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/console/assets/../../config.py", 404),
        ("GET", "/console/assets/%2e%2e/%2e%2e/config.py", 404),
        ("GET", "/console/assets/..%2f..%2fconfig.py", 404),
        ("GET", "/console/assets/" + "a/" * 2000 + "x.js", 404),
        ("GET", "/console/assets/missing.js", 404),
        ("POST", "/console", 405),
        ("PUT", "/console/", 405),
        ("DELETE", "/console/assets/main.js", 405),
    ],
)
async def test_nothing_outside_the_console_directory(method: str, path: str, status: int) -> None:
    async with (
        running_app(make_settings(), functions.registry) as app,
        http_client(app) as client,
    ):
        answer = await client.request(method, path)
    assert answer.status_code == status
    assert "Settings" not in answer.text


def test_the_screenshots_show_the_navigation_the_console_offers() -> None:
    """A picture per page of the navigation, each taken with today's navigation (the stamp the
    browser tests write), each shown in docs/console.md. Otherwise regenerate them:
    TOOLGATE_UPDATE_SCREENSHOTS=1 pytest tests/api/test_console_browser.py"""
    shots = {path.stem: path for path in DOCS_SCREENSHOTS.glob("*.png")}
    assert [page.id for page in nav_pages() if page.id not in shots] == []
    stamps = {name: stamp_of(path) for name, path in shots.items()}
    stale = {
        name: stamp
        for name, stamp in stamps.items()
        if stamp is None or stamp["nav"] != nav_titles(str(stamp["role"]))
    }
    assert stale == {}
    manual = (DOCS_SCREENSHOTS.parent / "console.md").read_text()
    assert [name for name in shots if f"(console/{name}.png)" not in manual] == []
