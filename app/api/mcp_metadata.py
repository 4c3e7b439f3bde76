"""RFC 9728 protected-resource metadata: OAuth-capable MCP clients read it after a 401 (its
address is the `resource_metadata` of the `WWW-Authenticate` header).

- `/mcp/{tenant_id}` (one tenant's endpoint) names its authorization server: the tenant's
  identity provider (`PUT /identity`), else toolgate's own (`app/api/oauth.py`), which binds a
  client to one of the tenant's client tokens through a connect link. A client that adds the
  server by URL finds its way from the 401 alone.
- `/mcp` (every tenant's) names none: its tokens come from a tenant's admin (the tenant key, or
  a client token from `POST /client-tokens`). Clients that start OAuth on any 401 regardless
  (the MCP Inspector CLI) find the same said by the 404s of the discovery and registration
  addresses at the origin, and print that.

Every URL here is the one the client used: the request's Host, or what a trusted proxy
forwarded (TRUSTED_PROXIES, `public_base_url`), so a client behind a proxy that rewrites Host
compares the `resource` with the URL it was given and finds them equal.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.container import Services
from app.deps import public_base_url
from app.errors import NotFoundError
from app.schemas.tenants import TENANT_ID_PATTERN

router = APIRouter(include_in_schema=False)

METADATA_PATH = "/.well-known/oauth-protected-resource"
MCP_PATH = "/mcp"
AUTHORIZATION_SERVER_PATH = "/oauth"  # toolgate's own issuer: `{base}/oauth`
NO_AUTHORIZATION_SERVER = (
    "toolgate issues no OAuth tokens for /mcp: it takes a bearer token from the tenant's admin"
    " (the tenant's API key, or a client token from POST /client-tokens). A client that adds"
    " a server by URL uses /mcp/{tenant_id}, whose metadata names its authorization server."
    " A 401 from /mcp means the token sent is unknown, revoked or expired."
)
_TENANT_ID = re.compile(TENANT_ID_PATTERN)


def resource_path(tenant_id: str | None) -> str:
    return MCP_PATH if tenant_id is None else f"{MCP_PATH}/{tenant_id}"


def metadata_url(request: Request, tenant_id: str | None = None) -> str:
    """Where the metadata of `/mcp` (or `/mcp/{tenant_id}`) is (RFC 9728 section 3.1: the
    resource's path appended)."""
    return f"{public_base_url(request)}{METADATA_PATH}{resource_path(tenant_id)}"


def www_authenticate(
    request: Request, *, token_presented: bool, tenant_id: str | None = None
) -> str:
    """The `WWW-Authenticate` of a 401 from `/mcp` (RFC 6750: an error code only when a token
    was sent; RFC 9728 section 5.1: where the metadata is)."""
    parts = ['Bearer realm="toolgate"']
    if token_presented:
        parts.append('error="invalid_token"')
        parts.append('error_description="The token is unknown, revoked or expired."')
    parts.append(f'resource_metadata="{metadata_url(request, tenant_id)}"')
    return ", ".join(parts)


def _shared_document(request: Request) -> dict[str, Any]:
    return {
        "resource": f"{public_base_url(request)}{MCP_PATH}",
        # No `authorization_servers`: tokens for /mcp are not issued through OAuth.
        "bearer_methods_supported": ["header"],
        # RFC 9728 has no field for "ask your admin": the name says it to whoever reads it.
        "resource_name": (
            "toolgate MCP gateway: tokens are issued by the tenant's admin (POST /client-tokens"
            " or the tenant's API key), not by an authorization server"
        ),
    }


async def _tenant_document(request: Request, tenant_id: str) -> dict[str, Any]:
    services: Services = request.app.state.services
    base = public_base_url(request)
    issuer = await services.identity.issuer(tenant_id)
    return {
        "resource": f"{base}{resource_path(tenant_id)}",
        "authorization_servers": [issuer or f"{base}{AUTHORIZATION_SERVER_PATH}"],
        "bearer_methods_supported": ["header"],
        "resource_name": f"toolgate: the tools of tenant {tenant_id}",
    }


_CACHED = {"Cache-Control": "public, max-age=3600"}


@router.get(f"{METADATA_PATH}{MCP_PATH}/{{tenant_id}}")
async def tenant_resource_metadata(tenant_id: str, request: Request) -> JSONResponse:
    """RFC 9728 metadata of one tenant's `/mcp/{tenant_id}`: its authorization server."""
    if not _TENANT_ID.fullmatch(tenant_id):
        raise NotFoundError("No MCP endpoint here: tenant ids are 2-63 of a-z, 0-9, '_', '-'.")
    # Not cached long: a tenant that configures its identity provider is named at once.
    document = await _tenant_document(request, tenant_id)
    return JSONResponse(document, headers={"Cache-Control": "no-cache"})


@router.get(f"{METADATA_PATH}{MCP_PATH}")
@router.get(METADATA_PATH)
async def protected_resource_metadata(request: Request) -> JSONResponse:
    """RFC 9728 metadata of the `/mcp` resource."""
    return JSONResponse(_shared_document(request), headers=_CACHED)


# Where OAuth clients look for an authorization server after a 401 when the metadata names none
# (RFC 8414 and OpenID discovery at the origin, then the MCP SDKs' default `/register`). The
# MCP Inspector CLI starts OAuth on any 401 and prints what the registration answered: this.
# (toolgate's own server is at `/oauth`: its metadata route, `.../oauth-authorization-server
# /oauth`, is matched before these.)
@router.get("/.well-known/oauth-authorization-server{suffix:path}")
@router.get("/.well-known/openid-configuration{suffix:path}")
@router.post("/register")
async def no_authorization_server() -> JSONResponse:
    """There is no authorization server at the origin: a 404 that says how tokens are issued."""
    raise NotFoundError(NO_AUTHORIZATION_SERVER)
