"""toolgate's own authorization server for `/mcp/{tenant_id}`, driven by the mcp SDK's OAuth
client (discovery from the 401, RFC 7591 registration, PKCE, refresh) on a real port, the
person's consent made over HTTP as the console's page makes it (a real browser makes it in
tests/mcp/test_mcp_oauth_browser.py)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.client.auth import OAuthFlowError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.main import create_app
from tests.support import functions
from tests.support.apps import TenantCredentials, create_tenant, make_settings
from tests.support.oauth_clients import (
    CALLBACK,
    HandFlow,
    HttpConsent,
    MemoryStorage,
    connect_link,
    oauth_client,
    oauth_session,
    pkce,
    served_app,
)
from tests.support.proxy import host_rewriting_proxy
from tests.support.servers import ThreadedServer
from tests.support.tls import make_certificates


@dataclass
class Service:
    url: str
    http: httpx.AsyncClient
    acme: TenantCredentials
    globex: TenantCredentials

    async def token_and_link(self, tenant: TenantCredentials, **body: Any) -> dict[str, Any]:
        return await connect_link(self.http, tenant.headers, **body)


@pytest.fixture
async def service() -> AsyncIterator[Service]:
    with served_app() as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            acme = await create_tenant(http, "acme")
            globex = await create_tenant(http, "globex")
            yield Service(url, http, acme, globex)


async def test_a_connect_link_lets_the_sdk_client_in_as_the_token(service: Service) -> None:
    link = await service.token_and_link(
        service.acme,
        context_arguments={"user_id": "alice", "api_token": "bound"},
        tool_ids=["profile", "rolldice"],
    )
    resource = f"{service.url}/mcp/acme"
    assert link["resource"] == resource and "/console/#/connect/link/tgl_" in link["url"]
    consent = HttpConsent(service.http, link["url"])
    storage = MemoryStorage()
    auth = oauth_client(resource, storage, consent.redirect, consent.callback)
    async with oauth_session(resource, auth) as session:
        names = sorted(tool.name for tool in (await session.list_tools()).tools)
        assert names == ["get_profile", "roll_dice"]
        result = await session.call_tool("get_profile", {"field": "email", "user_id": "mallory"})
        assert not result.is_error, result
    assert functions.RECEIVED[-1] == {"user_id": "alice", "api_token": "bound", "field": "email"}
    assert consent.shown[0]["client_name"] == "toolgate test client"
    assert consent.shown[0]["resource"] == resource
    assert storage.tokens is not None and storage.tokens.access_token.startswith("tgoa_")
    assert storage.client_info is not None and storage.client_info.client_secret


async def test_the_sdk_client_refreshes_and_the_refresh_token_rotates(service: Service) -> None:
    link = await service.token_and_link(service.acme)
    resource = f"{service.url}/mcp/acme"
    consent = HttpConsent(service.http, link["url"])
    storage = MemoryStorage()
    auth = oauth_client(resource, storage, consent.redirect, consent.callback)
    async with oauth_session(resource, auth) as session:
        await session.list_tools()
        first = storage.tokens
        assert first is not None
        auth.context.token_expiry_time = time.time() - 1  # the client sees its token expired
        assert (await session.list_tools()).tools
        second = storage.tokens
        assert second is not None
        assert second.refresh_token != first.refresh_token  # rotated
        assert second.access_token != first.access_token
    assert len(consent.shown) == 1  # refreshed, never asked the person again


async def test_revoking_the_token_ends_the_sdk_clients_access(service: Service) -> None:
    link = await service.token_and_link(service.acme)
    resource = f"{service.url}/mcp/acme"
    consent = HttpConsent(service.http, link["url"])
    auth = oauth_client(resource, MemoryStorage(), consent.redirect, consent.callback)
    with pytest.raises(BaseExceptionGroup) as raised:
        async with oauth_session(resource, auth) as session:
            assert (await session.list_tools()).tools
            revoked = await service.http.delete(
                f"/client-tokens/{link['token_id']}", headers=service.acme.headers
            )
            assert revoked.status_code == 204
            await session.list_tools()  # a 401: a new sign-in, which needs a new link
    assert raised.group_contains(AssertionError, match="used already or expired", depth=None)
    assert len(consent.shown) == 2


async def test_behind_a_host_rewriting_proxy(service: Service) -> None:
    """The SDK client compares the metadata's `resource` with the URL it was given: behind a
    proxy that rewrites Host that is the proxy's URL, known only from the forwarded headers of a
    trusted proxy (TRUSTED_PROXIES). Untrusted, the client stops, as clients did (issue 43)."""
    proxy = host_rewriting_proxy(service.url)
    try:
        link = await service.token_and_link(service.acme)
        resource = f"{proxy.url}/mcp/acme"
        consent = HttpConsent(service.http, link["url"])
        auth = oauth_client(resource, MemoryStorage(), consent.redirect, consent.callback)
        with pytest.raises(BaseExceptionGroup) as raised:
            async with oauth_session(resource, auth):
                pass
        assert raised.group_contains(OAuthFlowError, match=r"Protected resource .* does not match")
    finally:
        proxy.stop()


async def test_behind_a_trusted_host_rewriting_proxy() -> None:
    with served_app(trusted_proxies=["127.0.0.1"]) as url:
        proxy = host_rewriting_proxy(url)
        try:
            async with httpx.AsyncClient(base_url=proxy.url, timeout=30) as http:
                acme = await create_tenant(http, "acme")
                link = await connect_link(http, acme.headers)
                resource = f"{proxy.url}/mcp/acme"
                assert link["resource"] == resource
                consent = HttpConsent(http, link["url"])
                auth = oauth_client(resource, MemoryStorage(), consent.redirect, consent.callback)
                async with oauth_session(resource, auth) as session:
                    assert (await session.list_tools()).tools
        finally:
            proxy.stop()


@dataclass
class ClientDocuments:
    """Client ID Metadata Documents served over HTTPS (a throwaway CA) by their clients."""

    ca: str
    url: str
    documents: dict[str, dict[str, Any]]

    def publish(self, name: str, **fields: Any) -> str:
        url = f"{self.url}/clients/{name}.json"
        self.documents[name] = {
            "client_id": url,
            "client_name": f"{name} (CIMD)",
            "redirect_uris": [CALLBACK],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            **fields,
        }
        return url


@pytest.fixture
def client_documents(tmp_path: Path) -> Iterator[ClientDocuments]:
    ca, certificate, key = make_certificates(tmp_path)
    documents: dict[str, dict[str, Any]] = {}

    async def document(request: Request) -> Response:
        name = request.path_params["name"].removesuffix(".json")
        if name not in documents:
            return JSONResponse({"error": "not found"}, status_code=404)
        return JSONResponse(documents[name])

    app = Starlette(routes=[Route("/clients/{name}", document)])
    server = ThreadedServer(app, tls=(str(certificate), str(key))).start()
    yield ClientDocuments(str(ca), server.url, documents)
    server.stop()


@pytest.fixture
async def cimd_service(client_documents: ClientDocuments) -> AsyncIterator[Service]:
    with served_app(outbound_ca_bundle=client_documents.ca) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            acme = await create_tenant(http, "acme")
            yield Service(url, http, acme, acme)


async def test_a_client_id_metadata_document_client(
    cimd_service: Service, client_documents: ClientDocuments
) -> None:
    """The SDK client uses its document's URL as its id (no registration), as the server's
    metadata invites; the server reads the document to know its redirect URIs."""
    url = client_documents.publish("desktop")
    service = cimd_service
    link = await service.token_and_link(service.acme)
    resource = f"{service.url}/mcp/acme"
    consent = HttpConsent(service.http, link["url"])
    storage = MemoryStorage()
    auth = oauth_client(
        resource, storage, consent.redirect, consent.callback, client_metadata_url=url
    )
    async with oauth_session(resource, auth) as session:
        assert (await session.list_tools()).tools
    assert storage.client_info is not None and storage.client_info.client_id == url
    assert consent.shown[0]["client_name"] == "desktop (CIMD)"
    assert consent.shown[0]["client_id"] == url


@pytest.mark.parametrize(
    "fields",
    [
        {"client_id": "https://elsewhere.example/clients/desktop.json"},  # not itself
        {"redirect_uris": ["https://evil.example/cb"]},  # not the redirect asked for
        {"token_endpoint_auth_method": "client_secret_post"},
        {"client_secret": "shh"},
    ],
)
async def test_a_document_that_does_not_describe_the_client(
    cimd_service: Service, client_documents: ClientDocuments, fields: dict[str, Any]
) -> None:
    url = client_documents.publish("odd", **fields)
    flow = HandFlow(cimd_service.http, client_id=url)
    _, challenge = pkce()
    query = {
        "response_type": "code",
        "client_id": url,
        "redirect_uri": CALLBACK,
        "code_challenge": challenge,
        "state": "s",
    }
    sent = await flow.http.get("/oauth/authorize", params=query, follow_redirects=False)
    assert sent.status_code == 400, sent.text  # no sign-in kept, no redirect anywhere
    assert sent.json()["error"] == "invalid_request"


async def test_a_document_inside_the_network_is_not_fetched(
    client_documents: ClientDocuments,
) -> None:
    """Without OUTBOUND_ALLOW, the client's document on loopback is never fetched."""
    url = client_documents.publish("local")
    settings = make_settings(None, outbound_ca_bundle=client_documents.ca)
    app = create_app(settings, registry=functions.registry)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            query = {
                "response_type": "code",
                "client_id": url,
                "redirect_uri": CALLBACK,
                "code_challenge": "x" * 43,
            }
            sent = await http.get("/oauth/authorize", params=query)
            assert sent.status_code == 400
            assert "not found" in sent.json()["error_description"]
