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
from app.forwarded import Origin
from app.logs import request_context
from app.services.client_tokens import ClientToken, is_client_token
from app.services.identity import looks_like_jwt
from app.services.oauth_server import is_access_token


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
        self._client_tokens = client_tokens  # /chat, invoke and /mcp: end users are welcome

    async def __call__(self, request: Request) -> TenantContext:  # type: ignore[override]
        services: Services = request.app.state.services
        return await authenticate(
            services,
            presented_bearer(request),
            client_tokens=self._client_tokens,
            request=request,
        )


async def authenticate(
    services: Services,
    presented: str,
    *,
    client_tokens: bool,
    request: Request | None = None,
    tenant_id: str | None = None,
) -> TenantContext:
    """The tenant (and end user) behind a bearer value; 401 or 403 otherwise. An end user is a
    client token or a JWT of a tenant's identity provider, welcome where `client_tokens`.
    `tenant_id`: the tenant the endpoint is fixed to (`/mcp/{tenant_id}`): a credential of
    another is a 401."""
    if services.tenants.is_admin_key(presented):
        raise ForbiddenError("The admin key cannot be used on tenant routes; use a tenant API key.")
    token = await _end_user(services, presented, client_tokens, request, tenant_id)
    if token is not None:
        resolved = token.tenant_id
        await services.tenants.ensure_current(resolved)  # reconciled on first use
    else:
        found = await services.tenants.tenant_for_key(presented)
        if found is None:
            raise UnauthorizedError("The API key is not valid (unknown, malformed or rotated).")
        resolved = found
    if tenant_id is not None and resolved != tenant_id:
        raise UnauthorizedError(
            f"This credential is not one of tenant '{tenant_id}': /mcp/{tenant_id} takes that "
            "tenant's key, client tokens and end users' tokens only."
        )
    log_context = request_context.get()
    if log_context is not None:  # the request's log lines name the tenant from here on
        log_context["tenant"] = resolved
    return TenantContext(resolved, services, token)


async def _end_user(
    services: Services,
    presented: str,
    welcome: bool,
    request: Request | None,
    tenant_id: str | None,
) -> ClientToken | None:
    """The end user a client token, an access token of toolgate's OAuth server or a JWT stands
    for (401 when it is not valid, 403 where end users are not `welcome`); None for anything
    else (a tenant key)."""
    if is_client_token(presented):
        token = await services.client_tokens.verify(presented)
        if token is None:
            raise UnauthorizedError(
                "The client token is not valid (unknown, malformed, revoked or expired)."
            )
        if not welcome:
            raise ForbiddenError(END_USERS_ONLY_ON)
        return token
    if not (is_access_token(presented) or looks_like_jwt(presented)):
        return None
    if not welcome:  # nothing to check: refused whatever it is
        raise ForbiddenError(END_USERS_ONLY_ON)
    if is_access_token(presented):  # for its tenant's /mcp/{tenant_id} only
        token = await services.oauth_server.verify_access(presented)
        if tenant_id is None:
            raise UnauthorizedError(
                f"This access token is for /mcp/{token.tenant_id} only (its RFC 8707 resource)."
            )
        return token
    base_url = public_base_url(request) if request is not None else ""
    return await services.identity.verify(presented, tenant_id=tenant_id, base_url=base_url)


END_USERS_ONLY_ON = (
    "Client tokens and end users' tokens open /mcp, /chat, /v1, invoke and GET /approvals only; "
    "use the tenant API key."
)


def public_base_url(request: Request) -> str:
    """The service's URL as its client used it (scheme, host and root path): from the request's
    Host, or from a trusted proxy's forwarded headers (TRUSTED_PROXIES, app/forwarded.py)."""
    services: Services = request.app.state.services
    url = request.base_url
    peer = request.scope.get("client")
    origin = services.proxies.origin(
        peer[0] if peer else None, request.headers.getlist, Origin(url.scheme, url.netloc)
    )
    return f"{origin}{str(request.scope.get('root_path', '')).rstrip('/')}"


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
    "A tenant API key (tg_...), from POST /tenants or a key rotation. POST /chat, /v1, invoke "
    "(and /mcp) also take an end user's credential: a client token (tgc_..., POST "
    "/client-tokens) whose bound context and tool selection apply, or a JWT of the tenant's "
    "identity provider (PUT /identity) whose mapped claims are bound the same way."
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
