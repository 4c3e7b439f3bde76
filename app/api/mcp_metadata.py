"""RFC 9728 protected-resource metadata for `/mcp`: OAuth-capable MCP clients read it after a
401 (its address is the `resource_metadata` of the `WWW-Authenticate` header) and learn that
no authorization server issues tokens here: a tenant's admin does (`POST /client-tokens`, or
the tenant key). Clients that start OAuth on any 401 regardless (the MCP Inspector CLI) find the
same said by the 404s of the discovery and registration addresses, and print that."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from app.errors import NotFoundError

router = APIRouter(include_in_schema=False)

METADATA_PATH = "/.well-known/oauth-protected-resource"
MCP_PATH = "/mcp"
NO_AUTHORIZATION_SERVER = (
    "toolgate issues no OAuth tokens and registers no OAuth clients: /mcp takes a bearer token"
    " from the tenant's admin (the tenant's API key, or a client token from POST /client-tokens)."
    " A 401 from /mcp means the token sent is unknown, revoked or expired."
)


def metadata_url(request: Request) -> str:
    """Where the metadata of `/mcp` is (RFC 9728 section 3.1: the resource's path appended)."""
    return f"{_origin(request)}{METADATA_PATH}{MCP_PATH}"


def www_authenticate(request: Request, *, token_presented: bool) -> str:
    """The `WWW-Authenticate` of a 401 from `/mcp` (RFC 6750: an error code only when a token
    was sent; RFC 9728 section 5.1: where the metadata is)."""
    parts = ['Bearer realm="toolgate"']
    if token_presented:
        parts.append('error="invalid_token"')
        parts.append('error_description="The token is unknown, revoked or expired."')
    parts.append(f'resource_metadata="{metadata_url(request)}"')
    return ", ".join(parts)


def _origin(request: Request) -> str:
    return str(request.base_url).rstrip("/")


def _document(request: Request) -> dict[str, Any]:
    return {
        "resource": f"{_origin(request)}{MCP_PATH}",
        # No `authorization_servers`: tokens are not issued through OAuth here.
        "bearer_methods_supported": ["header"],
        # RFC 9728 has no field for "ask your admin": the name says it to whoever reads it.
        "resource_name": (
            "toolgate MCP gateway: tokens are issued by the tenant's admin (POST /client-tokens"
            " or the tenant's API key), not by an authorization server"
        ),
    }


@router.get(f"{METADATA_PATH}{MCP_PATH}")
@router.get(METADATA_PATH)
async def protected_resource_metadata(request: Request) -> JSONResponse:
    """RFC 9728 metadata of the `/mcp` resource."""
    return JSONResponse(_document(request), headers={"Cache-Control": "public, max-age=3600"})


# Where OAuth clients look for an authorization server after a 401 when the metadata names none
# (RFC 8414 and OpenID discovery at the origin, then the MCP SDKs' default `/register`). The
# MCP Inspector CLI starts OAuth on any 401 and prints what the registration answered: this.
@router.get("/.well-known/oauth-authorization-server{suffix:path}")
@router.get("/.well-known/openid-configuration{suffix:path}")
@router.post("/register")
async def no_authorization_server() -> JSONResponse:
    """There is no authorization server here: a 404 that says how tokens are issued."""
    raise NotFoundError(NO_AUTHORIZATION_SERVER)
