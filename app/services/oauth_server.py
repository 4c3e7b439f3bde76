"""toolgate's own OAuth 2.1 authorization server, for `/mcp/{tenant_id}` of tenants without an
identity provider: its tokens stand for one of the tenant's client tokens.

The HTTP side is the mcp SDK's (`mcp.server.auth` handlers, wired in `app/api/oauth.py`): PKCE
S256 required and checked, redirect URIs matched, client secrets checked, RFC 7591 registration.
This is the SDK's `OAuthAuthorizationServerProvider`, plus the parts only toolgate knows:

- **Connect links.** The tenant makes a client token as usual and asks for a one-time connect
  link to it (`POST /client-tokens/{token_id}/connect-link`). A client's sign-in stops at the
  consent page (the console's `#/connect`); the person who opens the link there allows it, and
  the client connecting is bound to that token: its codes, access and refresh tokens stand for
  it, bind its context and see its tools. The link is spent then.
- **Clients** register by RFC 7591 or name a Client ID Metadata Document
  (`app/services/oauth_clients.py`).
- **Tokens.** Opaque, random, stored as HMACs. An access token opens `/mcp/{tenant_id}` of its
  tenant only (its RFC 8707 resource); a refresh token is used once and replaced (rotation: a
  replayed one revokes its whole grant). Revoking the client token ends every grant made from
  it at once: each use looks the token up again (`ClientTokenService.by_id`).
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import urlsplit

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    IdentityAssertionParams,
    RefreshToken,
    TokenError,
    construct_redirect_uri,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from app.errors import NotFoundError, UnauthorizedError, UnprocessableError, field_error
from app.kit.cache import LoadingCache
from app.kit.crypto import key_hash
from app.limits.local import RateLimiter
from app.repositories.database import Document, utc_now
from app.repositories.oauth import OAuthRepository
from app.schemas.oauth import ConnectLink, PendingConsent
from app.services.client_tokens import ClientToken, ClientTokenService
from app.services.jwks import IssuerDocuments
from app.services.oauth_clients import OAuthClients

ACCESS_PREFIX = "tgoa_"
REFRESH_PREFIX = "tgor_"
CODE_PREFIX = "tgoc_"
REQUEST_PREFIX = "tgoq_"
LINK_PREFIX = "tgl_"
_LINK = re.compile(r"tgl_[A-Za-z0-9_-]{43}")
REQUEST_TTL_S = 600  # a sign-in waits this long for its consent
CODE_TTL_S = 60
MAX_CACHED = 100_000


def is_access_token(presented: str) -> bool:
    return presented.startswith(ACCESS_PREFIX)


@dataclass(frozen=True, slots=True)
class Lifetimes:
    access_s: int
    refresh_s: int
    link_s: int


class OAuthServer:
    """The SDK's provider protocol, and connect links and consent (see the module docstring)."""

    def __init__(
        self,
        *,
        grants: OAuthRepository,
        client_tokens: ClientTokenService,
        documents: IssuerDocuments,
        key_secret: bytes,
        lifetimes: Lifetimes,
        cache_ttl_s: float,
        rate: RateLimiter,
    ) -> None:
        self._grants = grants
        self._rate = rate
        self._tokens = client_tokens
        self._documents = documents
        self._key_secret = key_secret
        self._lifetimes = lifetimes
        self._access: LoadingCache[str, Document | None] = LoadingCache(
            lambda hashed: self._grants.find(hashed, "access", utc_now()),
            ttl_s=cache_ttl_s,
            max_entries=MAX_CACHED,
            name="oauth access tokens",
            keep=lambda found: found is not None,
        )
        self._clients = OAuthClients(grants, documents)

    def _hash(self, secret: str) -> str:
        return key_hash(self._key_secret, secret)

    def admit(self, address: str) -> None:
        """One more request that stores something without a credential from this client
        address (registration, a sign-in, a consent); 429 past OAUTH_RATE_LIMIT_PER_MINUTE."""
        self._rate.check(address)

    # -- clients ---------------------------------------------------------------------------

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return await self._clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        await self._clients.register(client_info)

    # -- authorization -----------------------------------------------------------------------

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        """Keep the sign-in for its consent and send the browser to the consent page."""
        if params.resource is not None and "/mcp/" not in params.resource:
            raise AuthorizeError(
                "invalid_target", "toolgate issues tokens for /mcp/{tenant_id} only"
            )
        request_id = REQUEST_PREFIX + secrets.token_urlsafe(32)
        await self._grants.insert(
            {
                "key_hash": self._hash(request_id),
                "kind": "request",
                "tenant_id": None,
                "client_id": client.client_id,
                "client_name": client.client_name,
                "redirect_uri": str(params.redirect_uri),
                "redirect_uri_provided_explicitly": params.redirect_uri_provided_explicitly,
                "code_challenge": params.code_challenge,
                "state": params.state,
                "scopes": params.scopes or [],
                "resource": params.resource,
                "expires_at": utc_now() + timedelta(seconds=REQUEST_TTL_S),
            }
        )
        # Relative to /oauth/authorize, so a root path the proxy adds is kept.
        return f"../console/#/connect/{request_id}"

    async def pending(self, request_id: str) -> PendingConsent:
        """What the consent page shows of a sign-in; 404 when it is unknown or expired."""
        found = await self._grants.find(self._hash(request_id), "request", utc_now())
        if found is None:
            raise NotFoundError(_GONE)
        return PendingConsent(
            client_id=found["client_id"],
            client_name=found.get("client_name"),
            redirect_host=urlsplit(found["redirect_uri"]).netloc,
            resource=found.get("resource"),
            expires_at=found["expires_at"],
        )

    async def consent(self, request_id: str, link: str, *, allow: bool, base_url: str) -> str:
        """The person's decision on a sign-in: where the browser goes back to (with a code when
        allowed, `access_denied` otherwise). Allowing takes a connect link of the tenant the
        client asked for; the link and the sign-in are spent then."""
        issuer = f"{base_url}/oauth"
        if not allow:
            refused = await self._grants.take(self._hash(request_id), "request", utc_now())
            if refused is None:
                raise NotFoundError(_GONE)
            return _back(refused, issuer, error="access_denied")
        code = _LINK.search(link)
        if code is None:
            raise _bad_link("paste the connect link you were given (it holds tgl_...)")
        now = utc_now()
        held = await self._grants.find(self._hash(code[0]), "link", now)
        if held is None:
            raise _bad_link("the connect link is unknown, used already or expired")
        resource = f"{base_url}/mcp/{held['tenant_id']}"
        request = await self._grants.find(self._hash(request_id), "request", now)
        if request is None:
            raise NotFoundError(_GONE)
        if request.get("resource") not in (None, resource):
            raise _bad_link(
                f"the link is for {resource}, the client asked for {request['resource']}"
            )
        if await self._tokens.by_id(held["token_id"], tenant_id=held["tenant_id"]) is None:
            raise _bad_link("the client token this link is for was revoked or has expired")
        if await self._grants.take(self._hash(code[0]), "link", now) is None:
            raise _bad_link("the connect link was used a moment ago")
        if await self._grants.take(self._hash(request_id), "request", now) is None:
            raise NotFoundError(_GONE)
        return _back(request, issuer, code=await self._issue_code(request, held, resource))

    async def _issue_code(self, request: Document, link: Document, resource: str) -> str:
        code = CODE_PREFIX + secrets.token_urlsafe(32)
        await self._grants.insert(
            {
                "key_hash": self._hash(code),
                "kind": "code",
                "grant_id": secrets.token_hex(16),
                "tenant_id": link["tenant_id"],
                "token_id": link["token_id"],
                "client_id": request["client_id"],
                "redirect_uri": request["redirect_uri"],
                "redirect_uri_provided_explicitly": request["redirect_uri_provided_explicitly"],
                "code_challenge": request["code_challenge"],
                "scopes": request["scopes"],
                "resource": resource,
                "expires_at": utc_now() + timedelta(seconds=CODE_TTL_S),
            }
        )
        await self._clients.keep(request["client_id"])
        return code

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        found = await self._grants.find(self._hash(authorization_code), "code", utc_now())
        if found is None or found["client_id"] != client.client_id:
            return None
        return AuthorizationCode(
            code=authorization_code,
            scopes=found["scopes"],
            expires_at=found["expires_at"].timestamp(),
            client_id=found["client_id"],
            code_challenge=found["code_challenge"],
            redirect_uri=found["redirect_uri"],
            redirect_uri_provided_explicitly=found["redirect_uri_provided_explicitly"],
            resource=found["resource"],
            subject=found["token_id"],
        )

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        taken = await self._grants.take(self._hash(authorization_code.code), "code", utc_now())
        if taken is None:
            raise TokenError("invalid_grant", "the authorization code was used already")
        return await self._issue_tokens(taken)

    # -- tokens ------------------------------------------------------------------------------

    async def _issue_tokens(self, grant: Document) -> OAuthToken:
        """A new access and refresh token for the grant, if its client token still stands."""
        if await self._tokens.by_id(grant["token_id"], tenant_id=grant["tenant_id"]) is None:
            await self._grants.delete_grant(grant["grant_id"])
            raise TokenError("invalid_grant", "the client token of this connection was revoked")
        access = ACCESS_PREFIX + secrets.token_urlsafe(32)
        refresh = REFRESH_PREFIX + secrets.token_urlsafe(32)
        now = utc_now()
        shared = {
            key: grant[key]
            for key in ("grant_id", "tenant_id", "token_id", "client_id", "scopes", "resource")
        }
        access_s, refresh_s = self._lifetimes.access_s, self._lifetimes.refresh_s
        await self._grants.insert(
            {
                **shared,
                "key_hash": self._hash(access),
                "kind": "access",
                "expires_at": now + timedelta(seconds=access_s),
            }
        )
        await self._grants.insert(
            {
                **shared,
                "key_hash": self._hash(refresh),
                "kind": "refresh",
                "rotated": False,
                "expires_at": now + timedelta(seconds=refresh_s),
            }
        )
        scope = " ".join(grant["scopes"]) or None
        return OAuthToken(
            access_token=access, expires_in=access_s, refresh_token=refresh, scope=scope
        )

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        found = await self._grants.find(self._hash(refresh_token), "refresh", utc_now())
        if found is None or found["client_id"] != client.client_id:
            return None
        if found["rotated"]:  # a replay of a used refresh token: the grant may be stolen
            await self.revoke_grant(found["grant_id"])
            return None
        return RefreshToken(
            token=refresh_token,
            client_id=found["client_id"],
            scopes=found["scopes"],
            expires_at=int(found["expires_at"].timestamp()),
            resource=found["resource"],
            subject=found["token_id"],
        )

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        used = await self._grants.rotate(self._hash(refresh_token.token), utc_now())
        if used is None:
            raise TokenError("invalid_grant", "the refresh token was used already")
        return await self._issue_tokens({**used, "scopes": scopes})

    async def exchange_identity_assertion(
        self, client: OAuthClientInformationFull, params: IdentityAssertionParams
    ) -> OAuthToken:
        """SEP-990's ID-JAG grant is not offered (a tenant's own provider's JWTs are taken
        directly instead)."""
        raise TokenError("unsupported_grant_type", "the JWT bearer grant is not supported here")

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = await self._access.get(self._hash(token))
        if found is None or found["expires_at"] <= utc_now():
            return None
        return AccessToken(
            token=token,
            client_id=found["client_id"],
            scopes=found["scopes"],
            expires_at=int(found["expires_at"].timestamp()),
            resource=found["resource"],
            subject=found["token_id"],
        )

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        """RFC 7009: the whole grant ends (its access and refresh tokens), whichever was sent."""
        kind = "access" if isinstance(token, AccessToken) else "refresh"
        found = await self._grants.find(self._hash(token.token), kind, utc_now())
        if found is not None:
            await self.revoke_grant(found["grant_id"])

    async def revoke_grant(self, grant_id: str) -> None:
        await self._grants.delete_grant(grant_id)
        self._access.invalidate_values(lambda doc: doc is not None and doc["grant_id"] == grant_id)

    async def verify_access(self, presented: str) -> ClientToken:
        """The client token an access token stands for; 401 saying why not."""
        found = await self._access.get(self._hash(presented))
        if found is None or found["expires_at"] <= utc_now():
            raise UnauthorizedError(
                "The access token is not valid (unknown, expired or revoked): sign in again."
            )
        token = await self._tokens.by_id(found["token_id"], tenant_id=found["tenant_id"])
        if token is None:
            raise UnauthorizedError(
                "The access token's client token was revoked or has expired: ask the tenant "
                "for a new connect link."
            )
        return token

    # -- links and the tenant's side ---------------------------------------------------------

    async def connect_link(self, token_id: str, *, tenant_id: str, base_url: str) -> ConnectLink:
        """A one-time link to bind a connecting client to the client token `token_id`."""
        if await self._tokens.by_id(token_id, tenant_id=tenant_id) is None:
            raise NotFoundError(f"client token '{token_id}' does not exist")
        link = LINK_PREFIX + secrets.token_urlsafe(32)
        expires_at = utc_now() + timedelta(seconds=self._lifetimes.link_s)
        await self._grants.insert(
            {
                "key_hash": self._hash(link),
                "kind": "link",
                "tenant_id": tenant_id,
                "token_id": token_id,
                "expires_at": expires_at,
            }
        )
        return ConnectLink(
            token_id=token_id,
            url=f"{base_url}/console/#/connect/link/{link}",
            resource=f"{base_url}/mcp/{tenant_id}",
            expires_at=expires_at,
        )

    async def forget_token(self, token_id: str, *, tenant_id: str) -> None:
        """The client token was revoked: every link, code and token made for it goes."""
        await self._grants.delete_for_token(token_id, tenant_id=tenant_id)
        self._access.invalidate_values(
            lambda doc: (
                doc is not None and (doc["tenant_id"], doc["token_id"]) == (tenant_id, token_id)
            )
        )

    async def drop_all(self, *, tenant_id: str) -> None:
        await self._grants.drop_all(tenant_id=tenant_id)
        self.forget_tenant(tenant_id)

    def forget_tenant(self, tenant_id: str) -> None:
        self._access.invalidate_values(
            lambda doc: doc is not None and doc["tenant_id"] == tenant_id
        )

    async def aclose(self) -> None:
        await self._access.aclose()
        await self._clients.aclose()


_GONE = "This sign-in is unknown or has expired: start again from your MCP client."


def _bad_link(reason: str) -> UnprocessableError:
    return UnprocessableError(
        "The connection cannot be allowed.", errors=[field_error("$.link", reason)]
    )


def _back(request: Document, issuer: str, **answer: str) -> str:
    """The client's redirect URI with the answer, its `state` and (RFC 9207) our issuer."""
    return construct_redirect_uri(
        request["redirect_uri"], **answer, state=request.get("state"), iss=issuer
    )
