"""Tenant routes: named secrets for external tools. Values go in and are never returned."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path, Response, status

from app.api.routing import StrictJSONRoute
from app.deps import TenantDep, WriteLimit
from app.schemas import examples
from app.schemas.fields import NAME_PATTERN
from app.schemas.problems import problem_responses
from app.schemas.secrets import SecretInfo, SecretPut

router = APIRouter(
    prefix="/secrets",
    tags=["secrets"],
    route_class=StrictJSONRoute,
    responses=problem_responses(401, 403, 503),
)
SecretNamePath = Annotated[
    str,
    Path(
        pattern=NAME_PATTERN,
        description="The secret's name, as tools refer to it: `{secret:NAME}`",
    ),
]


@router.put(
    "/{name}",
    response_model=SecretInfo,
    status_code=status.HTTP_200_OK,
    dependencies=[WriteLimit],
    responses={
        201: {"model": SecretInfo, "description": "Created"},
        **problem_responses(400, 409, 413, 422, 429),
    },
)
async def put_secret(
    name: SecretNamePath,
    body: Annotated[SecretPut, Body(openapi_examples=examples.SECRET)],
    tenant: TenantDep,
    response: Response,
) -> SecretInfo:
    """Store a secret (201) or replace its value (200). It is encrypted at rest (AES-GCM)."""
    stored, created = await tenant.services.secrets.put(name, body.value, tenant_id=tenant.id)
    if created:
        response.status_code = status.HTTP_201_CREATED
    return stored


@router.get("", response_model=list[SecretInfo])
async def list_secrets(tenant: TenantDep) -> list[SecretInfo]:
    """The names of the tenant's secrets, with dates; never their values."""
    return await tenant.services.secrets.all(tenant_id=tenant.id)


@router.delete(
    "/{name}",
    status_code=status.HTTP_204_NO_CONTENT,
    dependencies=[WriteLimit],
    responses=problem_responses(404, 422, 429),
)
async def delete_secret(name: SecretNamePath, tenant: TenantDep) -> Response:
    """Delete a secret; tools that use it then fail with an error naming it."""
    await tenant.services.secrets.delete(name, tenant_id=tenant.id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
