"""Request dependencies: the services, the admin check and the tenant behind a key."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.config import Settings
from app.errors import ForbiddenError, UnauthorizedError
from app.repositories.database import Database
from app.services.chat import ChatService
from app.services.tenants import TenantService
from app.services.tools import ToolService
from app.tools.registry import FunctionRegistry


@dataclass(frozen=True)
class Services:
    """Everything the lifespan builds once and the routes share."""

    settings: Settings
    database: Database
    registry: FunctionRegistry
    tenants: TenantService
    tools: ToolService
    chat: ChatService


async def get_services(request: Request) -> Services:
    # async on purpose: FastAPI runs a sync dependency in a worker thread, once per request.
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]

_tenant_bearer = HTTPBearer(
    scheme_name="TenantKey",
    auto_error=False,
    description="A tenant API key (tg_...), from POST /tenants or a key rotation.",
)
_admin_bearer = HTTPBearer(
    scheme_name="AdminKey", auto_error=False, description="The operator's ADMIN_API_KEY."
)


def _presented(credentials: HTTPAuthorizationCredentials | None) -> str:
    if credentials is None or not credentials.credentials:
        raise UnauthorizedError("Send an API key as 'Authorization: Bearer <key>'.")
    return credentials.credentials


@dataclass(frozen=True, slots=True)
class TenantContext:
    """The calling tenant and the services, resolved in one dependency (each level costs CPU)."""

    id: str
    services: Services


async def require_tenant(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_tenant_bearer)],
) -> TenantContext:
    """The tenant, resolved from the key once per request; never from the request's data."""
    services: Services = request.app.state.services
    presented = _presented(credentials)
    if services.tenants.is_admin_key(presented):
        raise ForbiddenError("The admin key cannot be used on tenant routes; use a tenant API key.")
    tenant_id = await services.tenants.tenant_for_key(presented)
    if tenant_id is None:
        raise UnauthorizedError("The API key is not valid (unknown, malformed or rotated).")
    return TenantContext(tenant_id, services)


async def require_admin(
    services: ServicesDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_admin_bearer)],
) -> None:
    presented = _presented(credentials)
    if services.tenants.is_admin_key(presented):
        return
    if await services.tenants.tenant_for_key(presented) is not None:
        raise ForbiddenError("Tenant keys cannot use admin routes; use the admin key.")
    raise UnauthorizedError("The API key is not valid.")


TenantDep = Annotated[TenantContext, Depends(require_tenant)]
AdminDep = Depends(require_admin)
