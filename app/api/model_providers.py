"""Tenant routes: the tenant's own model providers. Keys stay in its secrets, never here."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Response, status

from app.api.routing import StrictJSONRoute
from app.deps import TenantDep, WriteLimit
from app.schemas import examples
from app.schemas.fields import NAME_PATTERN
from app.schemas.model_providers import ModelProvider, ModelProviderPut
from app.schemas.problems import problem_responses

router = APIRouter(
    prefix="/model-providers",
    tags=["model-providers"],
    route_class=StrictJSONRoute,
    responses=problem_responses(401, 403, 503),
)
ProviderNamePath = Annotated[
    str, Path(pattern=NAME_PATTERN, description="The provider's name, as a chat's `provider`")
]


@router.put(
    "/{name}",
    response_model=ModelProvider,
    dependencies=[WriteLimit],
    responses={
        201: {"model": ModelProvider, "description": "Created"},
        **problem_responses(400, 409, 413, 422, 429),
    },
)
async def put_model_provider(
    name: ProviderNamePath,
    body: Annotated[ModelProviderPut, Body(openapi_examples=examples.MODEL_PROVIDER)],
    tenant: TenantDep,
    response: Response,
) -> Any:
    """Register a model provider (201) or replace it (200); its URL must pass the outbound
    checks and its key secret must exist."""
    shown, created = await tenant.services.model_providers.put(name, body, tenant_id=tenant.id)
    if created:
        response.status_code = status.HTTP_201_CREATED
    return shown


@router.get("", response_model=list[ModelProvider])
async def list_model_providers(tenant: TenantDep) -> Any:
    """The tenant's model providers (the name of each one's key secret, never the key)."""
    return await tenant.services.model_providers.all(tenant_id=tenant.id)


@router.get("/{name}", response_model=ModelProvider, responses=problem_responses(404, 422))
async def get_model_provider(name: ProviderNamePath, tenant: TenantDep) -> Any:
    """One model provider."""
    return await tenant.services.model_providers.get(name, tenant_id=tenant.id)


@router.delete(
    "/{name}",
    status_code=status.HTTP_204_NO_CONTENT,
    dependencies=[WriteLimit],
    responses=problem_responses(404, 422, 429),
)
async def delete_model_provider(name: ProviderNamePath, tenant: TenantDep) -> Response:
    """Delete one of the tenant's model providers; chats naming it then get 422."""
    await tenant.services.model_providers.delete(name, tenant_id=tenant.id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
