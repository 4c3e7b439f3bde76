"""Tenant routes: the tenant's identity provider, whose JWTs stand for its end users wherever a
client token is accepted (docs/security.md, "End users' own tokens")."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Request, Response, status

from app.api.routing import StrictJSONRoute
from app.deps import TenantDep, WriteLimit, public_base_url
from app.schemas import examples
from app.schemas.identity import IdentityConfig, IdentityPut, TokenTest, TokenTestRequest
from app.schemas.problems import problem_responses

router = APIRouter(
    prefix="/identity",
    tags=["identity"],
    route_class=StrictJSONRoute,
    responses=problem_responses(401, 403, 503),
)


@router.put(
    "",
    response_model=IdentityConfig,
    dependencies=[WriteLimit],
    responses=problem_responses(400, 409, 413, 422, 429),
)
async def put_identity(
    body: Annotated[IdentityPut, Body(openapi_examples=examples.IDENTITY)], tenant: TenantDep
) -> IdentityConfig:
    """Trust an identity provider: its JWTs open `/chat`, invoke and `/mcp` for the end user
    they name, with the mapped claims bound as context. 409 when another tenant trusts the same
    issuer with the same audience."""
    return await tenant.services.identity.put(body, tenant_id=tenant.id)


@router.get("", response_model=IdentityConfig, responses=problem_responses(404))
async def get_identity(tenant: TenantDep) -> IdentityConfig:
    """The tenant's identity provider; 404 when it trusts none."""
    return await tenant.services.identity.get(tenant_id=tenant.id)


@router.delete(
    "",
    status_code=status.HTTP_204_NO_CONTENT,
    dependencies=[WriteLimit],
    responses=problem_responses(404, 429),
)
async def delete_identity(tenant: TenantDep) -> Response:
    """Stop trusting the provider: its tokens are refused at once here, within
    CACHE_SYNC_INTERVAL_S on other replicas."""
    await tenant.services.identity.delete(tenant_id=tenant.id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/test", response_model=TokenTest, responses=problem_responses(400, 413, 422))
async def test_token(
    body: Annotated[TokenTestRequest, Body(openapi_examples=examples.TOKEN_TEST)],
    tenant: TenantDep,
    request: Request,
) -> TokenTest:
    """Which context values a JWT would bind on this tenant's endpoints, checked exactly as a
    request's token is (signature, issuer, audience, times); or why it would be refused."""
    return await tenant.services.identity.test(
        body.token, tenant_id=tenant.id, base_url=public_base_url(request)
    )
