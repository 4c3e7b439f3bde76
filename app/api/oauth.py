"""toolgate's own OAuth authorization server at `{base}/oauth` (app/services/oauth_server.py):
the mcp SDK's handlers for `/oauth/authorize`, `/oauth/token`, `/oauth/register` and
`/oauth/revoke`, its RFC 8414 metadata at `/.well-known/oauth-authorization-server/oauth`
(built per request: the issuer is the URL the client used), and the consent page's two calls.

Not REST routes of the API (they speak OAuth, form-encoded, with OAuth's error format), so they
are not in the OpenAPI document; docs/mcp.md describes the flow. The routes that anyone may call
without a credential and that store something (registration, sign-ins, consent) are limited per
client address (OAUTH_RATE_LIMIT_PER_MINUTE).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Request
from fastapi.responses import JSONResponse
from mcp.server.auth.handlers.authorize import AuthorizationHandler
from mcp.server.auth.handlers.register import RegistrationHandler
from mcp.server.auth.handlers.revoke import RevocationHandler
from mcp.server.auth.handlers.token import TokenHandler
from mcp.server.auth.middleware.client_auth import ClientAuthenticator
from mcp.server.auth.routes import build_metadata, cors_middleware
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from pydantic import AnyHttpUrl
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from app.container import Services
from app.deps import public_base_url
from app.schemas.oauth import ConsentAnswer, ConsentDecision, PendingConsent
from app.services.oauth_server import OAuthServer

ISSUER_PATH = "/oauth"
METADATA_PATH = f"/.well-known/oauth-authorization-server{ISSUER_PATH}"
MAX_REGISTRATION_BYTES = 16_384
REGISTRATION = ClientRegistrationOptions(enabled=True)

router = APIRouter(include_in_schema=False)


def _server(request: Request) -> OAuthServer:
    services: Services = request.app.state.services
    return services.oauth_server


def _admit(request: Request) -> OAuthServer:
    """The server, once this client address is within its rate (429 otherwise)."""
    services: Services = request.app.state.services
    peer = request.scope.get("client")
    address = services.proxies.client(peer[0] if peer else None, request.headers.getlist)
    services.oauth_server.admit(address or "unknown")
    return services.oauth_server


@router.get(METADATA_PATH)
async def authorization_server_metadata(request: Request) -> JSONResponse:
    """RFC 8414 metadata of toolgate's authorization server."""
    issuer = f"{public_base_url(request)}{ISSUER_PATH}"
    metadata = build_metadata(
        AnyHttpUrl(issuer), None, REGISTRATION, RevocationOptions(enabled=True)
    )
    metadata.client_id_metadata_document_supported = True
    metadata.authorization_response_iss_parameter_supported = True
    metadata.token_endpoint_auth_methods_supported = [
        "client_secret_post",
        "client_secret_basic",
        "none",
    ]
    document = metadata.model_dump(mode="json", exclude_none=True)
    document["issuer"] = issuer  # exactly as the resource metadata names it (no trailing /)
    return JSONResponse(document, headers={"Cache-Control": "no-cache"})


@router.get("/oauth/requests/{request_id}")
async def pending_consent(
    request_id: Annotated[str, Path(max_length=128)], request: Request
) -> PendingConsent:
    """What the consent page shows of a client's sign-in."""
    return await _admit(request).pending(request_id)


@router.post("/oauth/consent")
async def consent(decision: Annotated[ConsentDecision, Body()], request: Request) -> ConsentAnswer:
    """A person's decision on a sign-in: where the browser goes back to."""
    redirect_to = await _admit(request).consent(
        decision.request,
        decision.link,
        allow=decision.allow,
        base_url=public_base_url(request),
    )
    return ConsentAnswer(redirect_to=redirect_to)


async def _authorize(request: Request) -> Response:
    return await AuthorizationHandler(_admit(request)).handle(request)


async def _token(request: Request) -> Response:
    server = _server(request)
    answer: Response = await TokenHandler(server, ClientAuthenticator(server)).handle(request)
    return answer


async def _register(request: Request) -> Response:
    server = _admit(request)
    if len(await request.body()) > MAX_REGISTRATION_BYTES:
        return JSONResponse(
            {
                "error": "invalid_client_metadata",
                "error_description": f"the metadata is larger than {MAX_REGISTRATION_BYTES} bytes",
            },
            status_code=400,
        )
    return await RegistrationHandler(server, REGISTRATION).handle(request)


async def _revoke(request: Request) -> Response:
    server = _server(request)
    return await RevocationHandler(server, ClientAuthenticator(server)).handle(request)


def routes() -> list[BaseRoute]:
    """The SDK's OAuth endpoints under `/oauth`, with its CORS for browser-based clients (but
    the authorization endpoint, which browsers navigate to)."""
    both = ["GET", "POST"]
    posts = ["POST", "OPTIONS"]
    return [
        Route(f"{ISSUER_PATH}/authorize", _authorize, methods=both),
        Route(f"{ISSUER_PATH}/token", cors_middleware(_token, posts), methods=posts),
        Route(f"{ISSUER_PATH}/register", cors_middleware(_register, posts), methods=posts),
        Route(f"{ISSUER_PATH}/revoke", cors_middleware(_revoke, posts), methods=posts),
    ]
