"""Request dependencies: the services, the admin check and the tenant behind a key.

Only resolution lives here; what is built once is built in `app/container/`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPBearer

from app.container import Services
from app.errors import BadRequestError, ForbiddenError, UnauthorizedError
from app.logs import request_context
from app.services.client_tokens import ClientToken, is_client_token


async def get_services(request: Request) -> Services:
    # async on purpose: FastAPI runs a sync dependency in a worker thread, once per request.
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(get_services)]


def presented_bearer(request: Request) -> str:
    """The bearer value of the one Authorization header; 400 for two (which one a proxy, a
    log or this service reads would differ), 401 for none."""
    values = request.headers.getlist("authorization")
    if len(values) > 1:
        raise BadRequestError("Send one Authorization header, not several.")
    scheme, _, key = (values[0] if values else "").partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        raise UnauthorizedError("Send an API key as 'Authorization: Bearer <key>'.")
    return key


@dataclass(frozen=True, slots=True)
class TenantContext:
    """The calling tenant and the services; `token` when a client token called."""

    id: str
    services: Services
    token: ClientToken | None = None


class TenantKeyAuth(HTTPBearer):
    """Resolves the tenant from its key, once per request; never from the request's data.

    It is the security scheme itself, so OpenAPI shows it and FastAPI solves one dependency
    per request rather than a scheme plus a resolver (each level costs CPU on every request).
    """

    def __init__(self, *, client_tokens: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._client_tokens = client_tokens  # /chat and /mcp: client tokens are welcome

    async def __call__(self, request: Request) -> TenantContext:  # type: ignore[override]
        services: Services = request.app.state.services
        return await authenticate(
            services, presented_bearer(request), client_tokens=self._client_tokens
        )


async def authenticate(services: Services, presented: str, *, client_tokens: bool) -> TenantContext:
    """The tenant (and client token) behind a bearer value; 401 or 403 otherwise."""
    token = None
    if services.tenants.is_admin_key(presented):
        raise ForbiddenError("The admin key cannot be used on tenant routes; use a tenant API key.")
    if is_client_token(presented):
        token = await services.client_tokens.verify(presented)
        if token is None:
            raise UnauthorizedError(
                "The client token is not valid (unknown, malformed, revoked or expired)."
            )
        if not client_tokens:
            raise ForbiddenError("Client tokens open /mcp and /chat only; use the tenant API key.")
        tenant_id = token.tenant_id
        await services.tenants.ensure_current(tenant_id)  # reconciled on first use
    else:
        found = await services.tenants.tenant_for_key(presented)
        if found is None:
            raise UnauthorizedError("The API key is not valid (unknown, malformed or rotated).")
        tenant_id = found
    log_context = request_context.get()
    if log_context is not None:  # the request's log lines name the tenant from here on
        log_context["tenant"] = tenant_id
    return TenantContext(tenant_id, services, token)


class AdminKeyAuth(HTTPBearer):
    """Admits the operator's admin key only."""

    async def __call__(self, request: Request) -> None:  # type: ignore[override]
        services: Services = request.app.state.services
        presented = presented_bearer(request)
        if services.tenants.is_admin_key(presented):
            return
        if await services.tenants.tenant_for_key(presented) is not None or (
            is_client_token(presented) and await services.client_tokens.verify(presented)
        ):
            raise ForbiddenError("Tenant keys cannot use admin routes; use the admin key.")
        raise UnauthorizedError("The API key is not valid.")


# One scheme for every tenant route, so /docs asks for the key once; the routes that also
# take a client token say so in the same description.
TENANT_SCHEME = "TenantKey"
TENANT_SCHEME_DOC = (
    "A tenant API key (tg_...), from POST /tenants or a key rotation. POST /chat (and /mcp) "
    "also take a client token (tgc_..., POST /client-tokens) whose bound context and tool "
    "selection apply."
)
require_tenant = TenantKeyAuth(
    scheme_name=TENANT_SCHEME, auto_error=False, description=TENANT_SCHEME_DOC
)
require_admin = AdminKeyAuth(
    scheme_name="AdminKey", auto_error=False, description="The operator's ADMIN_API_KEY."
)
require_caller = TenantKeyAuth(
    client_tokens=True, scheme_name=TENANT_SCHEME, auto_error=False, description=TENANT_SCHEME_DOC
)
TenantDep = Annotated[TenantContext, Depends(require_tenant)]
CallerDep = Annotated[TenantContext, Depends(require_caller)]
AdminDep = Depends(require_admin)


async def limit_writes(tenant: TenantDep) -> None:
    """Per-tenant rate limit on writes (RATE_LIMIT_WRITES_PER_MINUTE): 429 with Retry-After."""
    await tenant.services.limits.check_write(tenant.id)


WriteLimit = Depends(limit_writes)
