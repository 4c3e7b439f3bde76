"""A tenant's identity provider that is a real OpenID provider (oidc-provider, node), and a real
OAuth MCP client (the mcp SDK's `OAuthClientProvider`) that finds it from `/mcp/{tenant_id}`'s
401 alone: RFC 9728 metadata, discovery, RFC 7591 registration at the provider, PKCE, the
person's sign-in and consent on the provider's own pages in headless chromium, its JWT access
token (for the endpoint's URL, RFC 8707) accepted with its claims bound, and a token refresh.
The provider's discovery, JWKS and tokens are used as it issues them."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from mcp.shared.auth import AuthorizationCodeResult
from playwright.async_api import Page

from tests.support import functions
from tests.support.apps import create_tenant
from tests.support.browser import Tab, browser_tab
from tests.support.oauth_clients import (
    MemoryStorage,
    callback_in,
    oauth_client,
    oauth_session,
    served_app,
)
from tests.support.oidc_provider import oidc_provider

pytestmark = [pytest.mark.slow, pytest.mark.processes, pytest.mark.browser]


@pytest.fixture(scope="module")
def provider() -> Iterator[str]:
    with oidc_provider() as issuer:
        yield issuer


@pytest.fixture
def served() -> Iterator[str]:
    with served_app() as url:
        yield url


class ProviderSignIn:
    """The person at the provider's pages: sign in as `login`, consent; the client's callback
    is read from the browser's cut redirect."""

    def __init__(self, page: Page, tab: Tab, login: str) -> None:
        self.page, self.tab, self.login = page, tab, login
        self.signed_in = 0

    async def redirect(self, authorization_url: str) -> None:
        await self.page.goto(authorization_url)
        await self.page.locator("input[name=login]").fill(self.login)
        await self.page.locator("input[name=password]").fill("any password")
        await self.page.locator("button[type=submit]").click()
        await self.page.locator("button[type=submit]", has_text="Continue").click()
        self.signed_in += 1

    async def callback(self) -> AuthorizationCodeResult:
        return await callback_in(self.tab.cut)


async def test_the_sdk_client_signs_in_at_the_tenants_provider(provider: str, served: str) -> None:
    async with httpx.AsyncClient(base_url=served, timeout=30) as http:
        acme = await create_tenant(http, "acme")
        trusted = await http.put(
            "/identity",
            json={"issuer": provider, "claims": {"user_id": "sub", "api_token": "org_id"}},
            headers=acme.headers,
        )
        assert trusted.status_code == 200, trusted.text
        assert trusted.json()["jwks_uri"] == f"{provider}/jwks"  # from its discovery document
        metadata = await http.get("/.well-known/oauth-protected-resource/mcp/acme")
        assert metadata.json()["authorization_servers"] == [provider]
    resource = f"{served}/mcp/acme"
    async with browser_tab(served, also=(provider,)) as (page, tab):
        person = ProviderSignIn(page, tab, "alice")
        storage = MemoryStorage()
        auth = oauth_client(resource, storage, person.redirect, person.callback)
        async with oauth_session(resource, auth) as session:
            assert "get_profile" in {tool.name for tool in (await session.list_tools()).tools}
            called = await session.call_tool("get_profile", {"field": "name", "user_id": "eve"})
            assert not called.is_error, called
            assert functions.RECEIVED[-1] == {
                "user_id": "alice",
                "api_token": "org-alice",
                "field": "name",
            }
            tokens = storage.tokens
            assert tokens is not None and tokens.access_token.startswith("eyJ")  # its JWT
            assert tokens.refresh_token
            auth.context.token_expiry_time = time.time() - 1  # the client sees it expired
            assert (await session.list_tools()).tools  # refreshed at the provider
            assert storage.tokens is not None
            assert storage.tokens.access_token != tokens.access_token
        assert person.signed_in == 1  # the refresh needed no person
        assert storage.client_info is not None and storage.client_info.client_id  # registered
        # Nothing else left the machine but the fonts the provider's development pages ask for.
        assert {u.split("/")[2] for u in tab.cut} <= {"fonts.googleapis.com"}, tab.cut


async def test_the_providers_token_for_another_tenant_is_refused(
    provider: str, served: str
) -> None:
    """Both tenants trust the same provider; a token it issued for acme's endpoint is not one
    for globex's."""
    async with httpx.AsyncClient(base_url=served, timeout=30) as http:
        tenants = [await create_tenant(http, name) for name in ("acme", "globex")]
        for tenant in tenants:
            answer = await http.put("/identity", json={"issuer": provider}, headers=tenant.headers)
            assert answer.status_code == 200, answer.text
    resource = f"{served}/mcp/acme"
    async with browser_tab(served, also=(provider,)) as (page, tab):
        person = ProviderSignIn(page, tab, "bob")
        storage = MemoryStorage()
        auth = oauth_client(resource, storage, person.redirect, person.callback)
        async with oauth_session(resource, auth) as session:
            await session.list_tools()
    assert storage.tokens is not None
    bearer = {"Authorization": f"Bearer {storage.tokens.access_token}"}
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    async with httpx.AsyncClient(base_url=served, timeout=30) as http:
        assert (await http.post("/mcp/acme", json=listing, headers=bearer)).status_code == 200
        theirs = await http.post("/mcp/globex", json=listing, headers=bearer)
        assert theirs.status_code == 401
        assert f"is not {served}/mcp/globex" in theirs.json()["detail"]
