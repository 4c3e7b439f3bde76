"""The person's part in a real browser (Debian's chromium, Playwright): the console's Identity
page (a provider trusted, a pasted token tested, a connect link made) and the consent page the
mcp SDK's OAuth client sends the browser to, the client getting back its code from the browser's
redirect. Every request off the service's origin is cut (tests/support/browser.py): the client's
callback is read from what was cut."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest
from mcp.shared.auth import AuthorizationCodeResult
from playwright.async_api import Page, expect

from tests.support import functions
from tests.support.apps import TenantCredentials, create_tenant
from tests.support.browser import Tab, browser_tab
from tests.support.console import SCREENSHOTS
from tests.support.issuer import Issuer
from tests.support.oauth_clients import (
    CALLBACK,
    MemoryStorage,
    callback_in,
    oauth_client,
    oauth_session,
    served_app,
)
from tests.support.screenshots import stamped

pytestmark = [pytest.mark.browser, pytest.mark.slow]
LINK = re.compile(r"tgl_[A-Za-z0-9_-]{43}")


@pytest.fixture
def served() -> Iterator[str]:
    with served_app() as url:
        yield url


async def picture(page: Page, name: str) -> None:
    """Saved as the console's browser tests save theirs: stamped with the navigation shown."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    role = await page.evaluate(
        "JSON.parse(sessionStorage.getItem('toolgate.console.credential') || 'null')?.role ?? null"
    )
    nav = await page.locator("#nav a").all_inner_texts()
    png = await page.screenshot(full_page=True)
    (SCREENSHOTS / f"{name}.png").write_bytes(stamped(png, {"role": role, "nav": nav}))


async def signed_in(page: Page, url: str, tenant: TenantCredentials) -> None:
    await page.goto(f"{url}/console")
    await page.get_by_label("Key or token").fill(tenant.api_key)
    await page.keyboard.press("Enter")
    await expect(page.get_by_role("heading", name="Tools")).to_be_visible()


async def test_the_identity_page(served: str, issuer: Issuer) -> None:
    async with httpx.AsyncClient(base_url=served) as http:
        acme = await create_tenant(http, "acme")
        await http.post("/client-tokens", json={"name": "alice"}, headers=acme.headers)
    async with browser_tab(served, height=1200) as (page, tab):
        await signed_in(page, served, acme)
        await page.get_by_role("link", name="Identity").click()
        await expect(page.get_by_role("heading", name="Identity", exact=True)).to_be_visible()
        await page.get_by_label("Issuer").fill(issuer.issuer)
        await page.get_by_label("JWKS URL (empty: OIDC discovery)").fill(issuer.jwks_uri)
        await page.get_by_label("Claims bound as context").fill(
            '{"user_id": "sub", "org": "org_id"}'
        )
        await page.get_by_role("button", name="Trust provider").click()
        await expect(page.locator("#status")).to_have_text(f"Trusting {issuer.issuer}.")
        token = issuer.token(f"{served}/mcp/acme", org_id="o-7")
        await page.get_by_label("JWT").fill(token)
        await page.get_by_role("button", name="Test token").click()
        tested = page.get_by_role("region", name="Token test")
        await expect(tested).to_contain_text("Accepted")
        await expect(tested.locator("tbody")).to_contain_text("o-7")
        await expect(tested.locator("tbody")).to_contain_text("u-42")
        await page.get_by_role("button", name="Connect link for alice").click()
        link = page.get_by_role("textbox", name=re.compile("^Connect link for alice: works once"))
        await expect(link).to_have_value(
            re.compile(rf"^{re.escape(served)}/console/#/connect/link/tgl_")
        )
        await picture(page, "identity")
        forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
        await page.get_by_label("JWT").fill(forged)
        await page.get_by_role("button", name="Test token").click()
        await expect(tested).to_contain_text("Refused")
        await expect(tested).to_contain_text("signature")
        assert not [e for e in tab.errors if "Failed to load resource" not in e], tab.errors
        assert tab.cut == []


class BrowserConsent:
    """The SDK client's redirect and callback, by a person in the browser: the link opened
    first (kept in the browser), then the sign-in allowed on the consent page."""

    def __init__(self, page: Page, tab: Tab) -> None:
        self.page = page
        self.tab = tab

    async def redirect(self, authorization_url: str) -> None:
        await self.page.goto(authorization_url)
        await expect(
            self.page.get_by_role("heading", name="Allow this MCP client?")
        ).to_be_visible()
        await expect(self.page.get_by_label("Connect link")).to_have_value(LINK)
        await picture(self.page, "consent")
        await self.page.get_by_role("button", name="Allow").click()

    async def callback(self) -> AuthorizationCodeResult:
        return await callback_in(self.tab.cut)


async def test_the_sdk_client_signs_in_through_the_consent_page(served: str) -> None:
    async with httpx.AsyncClient(base_url=served) as http:
        acme = await create_tenant(http, "acme")
        created = await http.post(
            "/client-tokens",
            json={"name": "alice", "context_arguments": {"user_id": "alice", "api_token": "b"}},
            headers=acme.headers,
        )
        token_id = created.json()["token_id"]
        link = (
            await http.post(f"/client-tokens/{token_id}/connect-link", headers=acme.headers)
        ).json()
    resource = f"{served}/mcp/acme"
    async with browser_tab(served, height=900) as (page, tab):
        await page.goto(link["url"])  # the person opens the link they were sent
        await expect(page.get_by_role("heading", name="Connect an MCP client")).to_be_visible()
        consent = BrowserConsent(page, tab)
        auth = oauth_client(resource, MemoryStorage(), consent.redirect, consent.callback)
        async with oauth_session(resource, auth) as session:
            result = await session.call_tool("get_profile", {"field": "name"})
            assert not result.is_error, result
        assert functions.RECEIVED[-1]["user_id"] == "alice"
        callback = urlsplit(CALLBACK)
        assert all(urlsplit(u).netloc == callback.netloc for u in tab.cut), tab.cut
        later = await page.context.new_page()  # the first tab went on to the client's callback
        await later.goto(f"{served}/console")
        assert json.loads(await later.evaluate("JSON.stringify(localStorage)")) == {}  # spent
        assert not [e for e in tab.errors if "Failed to load resource" not in e], tab.errors
