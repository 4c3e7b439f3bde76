"""Client tokens (tenant key): what a frontend gives one end user's agent for /mcp, /chat and
invoke, and connect links that bind an MCP client connecting by URL to one."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Request, Response, status

from app.api.routing import StrictJSONRoute
from app.deps import TenantDep, WriteLimit, public_base_url
from app.schemas import examples
from app.schemas.client_tokens import ClientToken, ClientTokenCreate, ClientTokenCreated
from app.schemas.oauth import ConnectLink
from app.schemas.problems import problem_responses

router = APIRouter(
    prefix="/client-tokens",
    tags=["client tokens"],
    route_class=StrictJSONRoute,
    responses=problem_responses(401, 403, 503),
)
TokenPath = Annotated[str, Path(pattern=r"^ct_[0-9a-f]{16}$", description="The token's id")]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ClientTokenCreated,
    responses=problem_responses(400, 409, 413, 422, 429),
    dependencies=[WriteLimit],
)
async def create_client_token(
    body: Annotated[ClientTokenCreate, Body(openapi_examples=examples.CLIENT_TOKEN)],
    tenant: TenantDep,
) -> ClientTokenCreated:
    """Issue a client token: it opens `/mcp`, `/chat` and invoke with its context values bound
    and only its tools visible. The token is in this response only."""
    return await tenant.services.client_tokens.create(body, tenant_id=tenant.id)


@router.get("", response_model=list[ClientToken])
async def list_client_tokens(tenant: TenantDep) -> list[ClientToken]:
    """The tenant's client tokens (never the tokens themselves, nor their context values)."""
    return await tenant.services.client_tokens.list(tenant_id=tenant.id)


@router.delete(
    "/{token_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=problem_responses(404, 422, 429),
    dependencies=[WriteLimit],
)
async def revoke_client_token(token_id: TokenPath, tenant: TenantDep) -> Response:
    """Revoke a token: refused at once here, within AUTH_CACHE_TTL_S on other replicas; so are
    the OAuth tokens of every client a connect link bound to it."""
    await tenant.services.client_tokens.revoke(token_id, tenant_id=tenant.id)
    await tenant.services.oauth_server.forget_token(token_id, tenant_id=tenant.id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/{token_id}/connect-link",
    status_code=status.HTTP_201_CREATED,
    response_model=ConnectLink,
    responses=problem_responses(404, 422, 429),
    dependencies=[WriteLimit],
)
async def create_connect_link(
    token_id: TokenPath, tenant: TenantDep, request: Request
) -> ConnectLink:
    """A one-time link that connects an MCP client added by URL (`/mcp/{tenant_id}`, OAuth) as
    this token: the person opens it when the client's sign-in shows the consent page."""
    return await tenant.services.oauth_server.connect_link(
        token_id, tenant_id=tenant.id, base_url=public_base_url(request)
    )
