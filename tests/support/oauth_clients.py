"""The mcp SDK's OAuth client (`OAuthClientProvider`: discovery, registration, PKCE, refresh) on
a served `/mcp/{tenant_id}`, with the person's step done by a test: over HTTP as the consent
page does it (`HttpConsent`), or by a real browser (tests/mcp/test_mcp_oauth_browser.py)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
import httpx2
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

from app.main import create_app
from tests.support import functions
from tests.support.apps import make_settings
from tests.support.servers import ThreadedServer
from tests.support.waiting import within

CALLBACK = "http://127.0.0.1:9/callback"  # never reached: the test reads the redirect itself


@dataclass
class MemoryStorage:
    """The SDK's `TokenStorage`, in memory: what the client keeps between its requests."""

    tokens: OAuthToken | None = None
    client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


def answer_of(url: str) -> AuthorizationCodeResult:
    """The authorization response in a redirect URI."""
    query = {name: values[0] for name, values in parse_qs(urlsplit(url).query).items()}
    if "code" not in query:
        raise AssertionError(f"the authorization was refused: {query}")
    return AuthorizationCodeResult(
        code=query["code"], state=query.get("state"), iss=query.get("iss")
    )


@dataclass
class HttpConsent:
    """The person's step over HTTP, as the console's consent page makes it: follow the
    authorization URL to the page, read the sign-in, allow it with a connect link."""

    http: httpx.AsyncClient
    link: str
    answers: list[AuthorizationCodeResult] = field(default_factory=list)
    shown: list[dict[str, Any]] = field(default_factory=list)

    async def redirect(self, authorization_url: str) -> None:
        sent = await self.http.get(authorization_url, follow_redirects=False)
        assert sent.status_code == 302, sent.text
        page = urljoin(authorization_url, sent.headers["location"])
        request_id = urlsplit(page).fragment.removeprefix("/connect/")
        pending = await self.http.get(f"/oauth/requests/{request_id}")
        assert pending.status_code == 200, pending.text
        self.shown.append(pending.json())
        decision = {"request": request_id, "link": self.link, "allow": True}
        allowed = await self.http.post("/oauth/consent", json=decision)
        assert allowed.status_code == 200, allowed.text
        self.answers.append(answer_of(allowed.json()["redirect_to"]))

    async def callback(self) -> AuthorizationCodeResult:
        return self.answers.pop()


def oauth_client(
    resource: str,
    storage: MemoryStorage,
    redirect: Callable[[str], Awaitable[None]],
    callback: Callable[[], Awaitable[AuthorizationCodeResult]],
    *,
    client_metadata_url: str | None = None,
) -> OAuthClientProvider:
    metadata = OAuthClientMetadata(
        client_name="toolgate test client",
        redirect_uris=[CALLBACK],  # type: ignore[list-item]
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="client_secret_post" if client_metadata_url is None else "none",
    )
    return OAuthClientProvider(
        server_url=resource,
        client_metadata=metadata,
        storage=storage,
        redirect_handler=redirect,
        callback_handler=callback,
        client_metadata_url=client_metadata_url,
    )


@contextlib.asynccontextmanager
async def oauth_session(resource: str, auth: OAuthClientProvider) -> AsyncIterator[ClientSession]:
    """An MCP session on `resource` whose requests the OAuth client authorizes."""
    async with (
        httpx2.AsyncClient(auth=auth, timeout=30) as http,
        streamable_http_client(resource, http_client=http) as (read, write, *_),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def pkce() -> tuple[str, str]:
    """(verifier, S256 challenge)."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


@dataclass
class HandFlow:
    """The authorization code flow made request by request, for the refusals the SDK's client
    never provokes."""

    http: httpx.AsyncClient
    client_id: str = ""
    client_secret: str = ""
    verifier: str = ""

    async def register(self, **metadata: Any) -> dict[str, Any]:
        body = {"client_name": "by hand", "redirect_uris": [CALLBACK], **metadata}
        answer = await self.http.post("/oauth/register", json=body)
        assert answer.status_code == 201, answer.text
        self.client_id = answer.json()["client_id"]
        self.client_secret = answer.json().get("client_secret", "")
        return dict(answer.json())

    async def sign_in(self, resource: str | None, **params: str) -> str:
        """The sign-in's request id (from the consent page's address)."""
        self.verifier, challenge = pkce()
        query = {
            "response_type": "code",
            "client_id": self.client_id,
            "redirect_uri": CALLBACK,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "state": "st-1",
            **({"resource": resource} if resource else {}),
            **params,
        }
        sent = await self.http.get("/oauth/authorize", params=query, follow_redirects=False)
        assert sent.status_code == 302, sent.text
        return urlsplit(sent.headers["location"]).fragment.removeprefix("/connect/")

    async def consent(self, request_id: str, link: str, *, allow: bool = True) -> httpx.Response:
        decision = {"request": request_id, "link": link, "allow": allow}
        return await self.http.post("/oauth/consent", json=decision)

    async def token(self, **form: str) -> httpx.Response:
        body = {"client_id": self.client_id, "client_secret": self.client_secret, **form}
        return await self.http.post("/oauth/token", data=body)

    async def tokens(self, resource: str | None, link: str) -> dict[str, Any]:
        """Sign in, allow with `link`, exchange the code: the token response."""
        allowed = await self.consent(await self.sign_in(resource), link)
        assert allowed.status_code == 200, allowed.text
        code = answer_of(allowed.json()["redirect_to"]).code
        exchanged = await self.token(
            grant_type="authorization_code",
            code=code,
            redirect_uri=CALLBACK,
            code_verifier=self.verifier,
        )
        assert exchanged.status_code == 200, exchanged.text
        return dict(exchanged.json())


async def connect_link(
    http: httpx.AsyncClient, headers: dict[str, str], **body: Any
) -> dict[str, Any]:
    """A new client token of the tenant whose key is in `headers`, and a connect link to it:
    the link's answer with the token itself (`token`)."""
    created = await http.post("/client-tokens", json={"name": "alice", **body}, headers=headers)
    assert created.status_code == 201, created.text
    token_id = created.json()["token_id"]
    made = await http.post(f"/client-tokens/{token_id}/connect-link", headers=headers)
    assert made.status_code == 201, made.text
    return {**made.json(), "token": created.json()["token"]}


@contextlib.contextmanager
def served_app(**settings: Any) -> Iterator[str]:
    """The service (the test function dictionary, loopback reachable) on a real port, run on a
    thread of its own; its URL."""
    config = make_settings(None, outbound_allow=["127.0.0.1"], auth_cache_ttl_s=0, **settings)
    server = ThreadedServer(create_app(config, registry=functions.registry), lifespan="on")
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


async def callback_in(cut: list[str]) -> AuthorizationCodeResult:
    """The authorization response of the browser's redirect to the client's callback, which the
    browser tab cut (tests/support/browser.py): the client's side of the redirect."""
    await within(lambda: any(url.startswith(CALLBACK) for url in cut), 20)
    url = next(url for url in cut if url.startswith(CALLBACK))
    cut.remove(url)
    return answer_of(url)
