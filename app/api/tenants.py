"""Admin routes: tenants and their keys."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Query, Response, status

from app.api.routing import StrictJSONRoute
from app.deps import AdminDep, ServicesDep
from app.schemas import examples
from app.schemas.problems import problem_responses
from app.schemas.tenants import (
    TENANT_ID_PATTERN,
    KeyRotationOptions,
    OutboundAllow,
    OutboundAllowUpdate,
    RotatedTenantKey,
    TenantCreate,
    TenantKey,
    TenantPage,
)

router = APIRouter(
    prefix="/tenants",
    tags=["tenants (admin)"],
    route_class=StrictJSONRoute,
    dependencies=[AdminDep],
    responses=problem_responses(401, 403, 503),
)
TenantPath = Annotated[str, Path(pattern=TENANT_ID_PATTERN, description="The tenant's id")]


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=TenantKey,
    responses=problem_responses(400, 409, 413, 422),
)
async def create_tenant(
    body: Annotated[TenantCreate, Body(openapi_examples=examples.TENANT)], services: ServicesDep
) -> TenantKey:
    """Create a tenant with its seeded tools; the response holds its API key, shown only once."""
    tenant, api_key = await services.tenants.create(tenant_id=body.tenant_id)
    return TenantKey(tenant_id=tenant.tenant_id, api_key=api_key)


@router.get("", response_model=TenantPage, responses=problem_responses(422))
async def list_tenants(
    services: ServicesDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
) -> TenantPage:
    """List tenants, ordered by id (keys are never shown)."""
    items, total = await services.tenants.page(limit=limit, offset=offset)
    return TenantPage(items=items, total=total, limit=limit, offset=offset)


@router.delete(
    "/{tenant_id}", status_code=status.HTTP_204_NO_CONTENT, responses=problem_responses(404, 422)
)
async def delete_tenant(tenant_id: TenantPath, services: ServicesDep) -> Response:
    """Delete a tenant and all its tools; its key stops working at once."""
    await services.tenants.delete(tenant_id=tenant_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/{tenant_id}/keys",
    response_model=RotatedTenantKey,
    responses=problem_responses(400, 404, 413, 422),
)
async def rotate_tenant_key(
    tenant_id: TenantPath,
    services: ServicesDep,
    body: Annotated[KeyRotationOptions | None, Body(openapi_examples=examples.KEY_ROTATION)] = None,
) -> RotatedTenantKey:
    """Issue a new API key for a tenant; the previous key stops working at once, and so do
    the tenant's client tokens unless `keep_client_tokens` is true."""
    keep = body is not None and body.keep_client_tokens
    rotation = await services.tenants.rotate_key(tenant_id=tenant_id, keep_client_tokens=keep)
    return RotatedTenantKey(
        tenant_id=tenant_id,
        api_key=rotation.api_key,
        client_tokens_revoked=rotation.revoked,
        client_tokens_kept=rotation.kept,
    )


@router.get(
    "/{tenant_id}/outbound", response_model=OutboundAllow, responses=problem_responses(404, 422)
)
async def get_tenant_outbound(tenant_id: TenantPath, services: ServicesDep) -> OutboundAllow:
    """The tenant's own outbound allow list (empty: the operator's policy only)."""
    return OutboundAllow(allow=await services.outbound.allow_list(tenant_id))


@router.put(
    "/{tenant_id}/outbound",
    response_model=OutboundAllow,
    responses=problem_responses(400, 404, 413, 422),
)
async def set_tenant_outbound(
    tenant_id: TenantPath,
    body: Annotated[OutboundAllowUpdate, Body(openapi_examples=examples.OUTBOUND)],
    services: ServicesDep,
) -> OutboundAllow:
    """Replace the tenant's own outbound allow list: its external tools and MCP servers may
    then also reach these hosts, addresses or networks (an entry with a port: on that port
    only). Entries opening every address, loopback or link-local (metadata) need `force`. It
    applies at once on this replica and within AUTH_CACHE_TTL_S on the others; tools already
    stored are judged again when they connect."""
    allow = await services.outbound.set_allow_list(tenant_id, body.allow, force=body.force)
    return OutboundAllow(allow=allow)
