"""A tenant's identity provider (`PUT /identity`) and the check of its JWTs.

A JWT of a tenant's trusted issuer stands for one end user wherever a client token is accepted
(`/chat`, invoke, `/mcp`, `/mcp/{tenant_id}`): it is verified here and becomes a `ClientToken`
whose context is the mapped claims, so the toolbox binds them by the one context contract
(`app/services/toolbox.py`, `caller_context`): a request can neither set nor override them.

What a token must pass, each refusal a 401 saying which: a JWS of an algorithm the tenant allows
(asymmetric only: never `none`, never an HMAC keyed with a public key); signed by a key of the
issuer's JWKS (`app/services/jwks.py`: fetched under the tenant's outbound policy, bounded,
cached, refreshed for an unknown `kid` at most once per interval); `iss` exactly the issuer;
`aud` the configured audience, else the tenant's MCP endpoint URL (RFC 8707); `exp` and `nbf`
with JWT_LEEWAY_S of leeway; `sub` and the tenant's required claims present; mapped claims of a
type a context value may have. PyJWT does the JWS and claim checks (`jwt.decode`).

Which tenant: the path's on `/mcp/{tenant_id}`; elsewhere the one whose (issuer, audience) the
token carries (a pair belongs to at most one tenant, `app/repositories/identity.py`); an
audience that is this service's `/mcp/{tenant_id}` URL names that tenant and no other.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jwt
from jwt.exceptions import (
    ExpiredSignatureError,
    ImmatureSignatureError,
    InvalidAlgorithmError,
    InvalidAudienceError,
    InvalidIssuerError,
    InvalidSignatureError,
    MissingRequiredClaimError,
    PyJWTError,
)

from app.errors import NotFoundError, UnauthorizedError, UnprocessableError, field_error
from app.kit.cache import LoadingCache
from app.repositories.database import Document, utc_now
from app.repositories.identity import IdentityRepository
from app.schemas.identity import IdentityConfig, IdentityPut, TokenTest
from app.services.changes import Publish, unpublished
from app.services.client_tokens import ClientToken
from app.services.jwks import IssuerDocuments, IssuerFetchError, JwksCache

_JWT_SHAPE = re.compile(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*")
MAX_TOKEN_CHARS = 16_384
MAX_AUDIENCES = 8  # of a token's `aud` list that are looked at
MAX_CACHED = 100_000
ALWAYS_REQUIRED = ("exp", "iss", "aud", "sub")
MCP_PATH = "/mcp/"
LAST_SECOND = 253_402_300_799.0  # 9999-12-31T23:59:59Z


def looks_like_jwt(presented: str) -> bool:
    """A compact JWS (`eyJ...`, three base64url parts): what no key or token of ours looks like."""
    return presented.startswith("eyJ") and _JWT_SHAPE.fullmatch(presented) is not None


def resource_url(base_url: str, tenant_id: str) -> str:
    """The URL of a tenant's MCP endpoint: its RFC 8707 resource and default audience."""
    return f"{base_url}{MCP_PATH}{tenant_id}"


@dataclass(frozen=True, slots=True)
class TrustedIssuer:
    tenant_id: str
    issuer: str
    jwks_uri: str
    audience: str | None  # None: the tenant's MCP endpoint URL
    claims: dict[str, str]
    required: tuple[str, ...]
    algorithms: tuple[str, ...]

    @classmethod
    def of(cls, doc: Document) -> TrustedIssuer:
        return cls(
            tenant_id=doc["tenant_id"],
            issuer=doc["issuer"],
            jwks_uri=doc["jwks_uri"],
            audience=doc.get("audience"),
            claims=dict(doc.get("claims") or {}),
            required=tuple(doc.get("required_claims") or ()),
            algorithms=tuple(doc.get("algorithms") or ()),
        )

    def expected_audience(self, base_url: str) -> str:
        return self.audience or resource_url(base_url, self.tenant_id)


def _refused(reason: str) -> UnauthorizedError:
    return UnauthorizedError(f"The token is not accepted: {reason}.")


def _audience_key(audience: str | None, tenant_id: str) -> str:
    return audience if audience is not None else f"mcp:{tenant_id}"


class IdentityService:
    def __init__(
        self,
        *,
        providers: IdentityRepository,
        documents: IssuerDocuments,
        keys: JwksCache,
        leeway_s: float,
        cache_ttl_s: float,
        stale_if_error_s: float = 0.0,
        publish: Publish = unpublished,
    ) -> None:
        self._publish = publish  # other replicas forget the tenant's provider at once
        self._providers = providers
        self._documents = documents
        self.documents = documents  # shared with the OAuth server (client metadata documents)
        self._keys = keys
        self._leeway_s = leeway_s
        self._by_tenant: LoadingCache[str, TrustedIssuer | None] = LoadingCache(
            self._read_tenant,
            ttl_s=cache_ttl_s,
            stale_if_error_s=stale_if_error_s,
            max_entries=MAX_CACHED,
            name="identity providers",
        )
        self._by_pair: LoadingCache[tuple[str, str], TrustedIssuer | None] = LoadingCache(
            self._read_pair,
            ttl_s=cache_ttl_s,
            stale_if_error_s=stale_if_error_s,
            max_entries=MAX_CACHED,
            name="identity providers by issuer",
            keep=lambda found: found is not None,  # made-up issuers are not remembered
        )

    async def _read_tenant(self, tenant_id: str) -> TrustedIssuer | None:
        doc = await self._providers.find(tenant_id=tenant_id)
        return None if doc is None else TrustedIssuer.of(doc)

    async def _read_pair(self, pair: tuple[str, str]) -> TrustedIssuer | None:
        doc = await self._providers.find_by_pair(*pair)
        return None if doc is None else TrustedIssuer.of(doc)

    async def get(self, *, tenant_id: str) -> IdentityConfig:
        doc = await self._providers.find(tenant_id=tenant_id)
        if doc is None:
            raise NotFoundError("This tenant trusts no identity provider (PUT /identity).")
        return IdentityConfig.model_validate(doc)

    async def issuer(self, tenant_id: str) -> str | None:
        """The tenant's trusted issuer, for its protected-resource metadata."""
        trusted = await self._by_tenant.get(tenant_id)
        return None if trusted is None else trusted.issuer

    async def put(self, body: IdentityPut, *, tenant_id: str) -> IdentityConfig:
        """Store the tenant's provider: 422 for a `jwks_uri` its outbound policy does not reach,
        or (without one) a discovery document that cannot be read; 409 for an (issuer, audience)
        pair another tenant has. The keys are fetched when a token first needs them (POST
        /identity/test checks a token end to end)."""
        if body.jwks_uri is None:
            jwks_uri = await self._discover(body.issuer, tenant_id)
        else:
            jwks_uri = body.jwks_uri
            problems = await self._documents.url_problems(jwks_uri, tenant_id=tenant_id)
            if problems:
                raise _unreadable("$.jwks_uri", "; ".join(problems))
        now = utc_now()
        doc = {
            "issuer": body.issuer,
            "jwks_uri": jwks_uri,
            "jwks_discovered": body.jwks_uri is None,
            "audience": body.audience,
            "audience_key": _audience_key(body.audience, tenant_id),
            "claims": dict(body.claims),
            "required_claims": list(dict.fromkeys(body.required_claims)),
            "algorithms": list(dict.fromkeys(body.algorithms)),
            "created_at": now,
            "updated_at": now,
        }
        stored = await self._providers.put(doc, tenant_id=tenant_id)
        self.forget_tenant(tenant_id)
        await self._publish(tenant_id)
        return IdentityConfig.model_validate(stored)

    async def _discover(self, issuer: str, tenant_id: str) -> str:
        url = issuer.rstrip("/") + "/.well-known/openid-configuration"
        try:
            document = await self._documents.fetch(url, tenant_id=tenant_id)
        except IssuerFetchError as exc:
            raise _unreadable(
                "$.issuer", f"OIDC discovery at {url} failed: {exc}; send `jwks_uri`"
            ) from None
        if document.get("issuer") != issuer:
            raise _unreadable("$.issuer", f"{url} names another issuer: {document.get('issuer')}")
        jwks_uri = document.get("jwks_uri")
        if not isinstance(jwks_uri, str) or not jwks_uri.startswith(("https://", "http://")):
            raise _unreadable("$.issuer", f"{url} names no `jwks_uri`; send `jwks_uri`")
        return jwks_uri

    async def delete(self, *, tenant_id: str) -> None:
        if not await self._providers.delete(tenant_id=tenant_id):
            raise NotFoundError("This tenant trusts no identity provider (PUT /identity).")
        self.forget_tenant(tenant_id)
        await self._publish(tenant_id)

    async def drop_all(self, *, tenant_id: str) -> None:
        """The tenant is deleted: its provider goes (its issuer and audience are free again)."""
        await self._providers.drop_all(tenant_id=tenant_id)
        self.forget_tenant(tenant_id)

    def forget_tenant(self, tenant_id: str) -> None:
        self._by_tenant.invalidate(tenant_id)
        self._by_pair.invalidate_values(
            lambda found: found is not None and found.tenant_id == tenant_id
        )
        self._keys.forget(tenant_id)

    async def verify(self, presented: str, *, tenant_id: str | None, base_url: str) -> ClientToken:
        """The end user a JWT stands for, as a client token of its tenant; 401 saying why not.
        `tenant_id`: the tenant the endpoint is fixed to (`/mcp/{tenant_id}`), else None."""
        if len(presented) > MAX_TOKEN_CHARS:
            raise _refused(f"it is longer than {MAX_TOKEN_CHARS} characters")
        if tenant_id is None:
            trusted = await self._trusted_for(presented, base_url)
        else:
            fixed = await self._by_tenant.get(tenant_id)
            if fixed is None:
                raise _refused(f"tenant '{tenant_id}' trusts no identity provider")
            trusted = fixed
        claims = await self._checked_claims(presented, trusted, base_url)
        return _as_client_token(trusted, claims)

    async def _trusted_for(self, presented: str, base_url: str) -> TrustedIssuer:
        """The configuration of the tenant whose issuer and audience the token names."""
        try:
            unverified = jwt.decode(presented, options={"verify_signature": False})
        except PyJWTError:
            raise _refused("it is not a readable JWT") from None
        issuer, audiences = unverified.get("iss"), unverified.get("aud")
        if not isinstance(issuer, str):
            raise _refused("it names no issuer (`iss`)")
        audiences = [audiences] if isinstance(audiences, str) else audiences
        if not isinstance(audiences, list) or not audiences:
            raise _refused("it names no audience (`aud`)")
        for audience in audiences[:MAX_AUDIENCES]:
            if not isinstance(audience, str):
                continue
            endpoint = _endpoint_tenant(audience, base_url)
            if endpoint is not None:  # this service's /mcp/{tenant}: that tenant only
                trusted = await self._by_tenant.get(endpoint)
                if trusted is not None and trusted.issuer == issuer:
                    return trusted
                continue
            found = await self._by_pair.get((issuer, audience))
            if found is not None:
                return found
        raise _refused(f"no tenant trusts the issuer {issuer!r} for its audience")

    async def _checked_claims(
        self, presented: str, trusted: TrustedIssuer, base_url: str
    ) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(presented)
        except PyJWTError:
            raise _refused("it is not a readable JWT") from None
        algorithm, kid = header.get("alg"), header.get("kid")
        if not isinstance(algorithm, str) or algorithm not in trusted.algorithms:
            allowed = ", ".join(trusted.algorithms)
            raise _refused(f"its algorithm {algorithm!r} is not allowed (allowed: {allowed})")
        if kid is not None and not isinstance(kid, str):
            raise _refused("its `kid` is not a string")
        try:
            choice = await self._keys.key(
                trusted.jwks_uri, kid, algorithm, tenant_id=trusted.tenant_id
            )
        except IssuerFetchError as exc:
            raise _refused(
                f"the issuer's keys ({trusted.jwks_uri}) cannot be fetched: {exc}"
            ) from None
        if choice.key is None:
            raise _refused(choice.problem or "no key of the issuer verifies it")
        expected = trusted.expected_audience(base_url)
        try:
            claims: dict[str, Any] = jwt.decode(
                presented,
                choice.key,
                algorithms=[algorithm],
                audience=expected,
                issuer=trusted.issuer,
                leeway=self._leeway_s,
                options={"require": [*ALWAYS_REQUIRED, *trusted.required]},
            )
        except PyJWTError as exc:
            raise _refused(_why(exc, trusted, expected)) from None
        return claims

    async def test(self, presented: str, *, tenant_id: str, base_url: str) -> TokenTest:
        """What `presented` would bind on this tenant's endpoints, checked as a request's token
        is (the signature too), or why it would be refused."""
        try:
            token = await self.verify(presented, tenant_id=tenant_id, base_url=base_url)
        except UnauthorizedError as exc:
            return TokenTest(accepted=False, reason=exc.message)
        subject = jwt.decode(presented, options={"verify_signature": False}).get("sub")
        return TokenTest(
            accepted=True, subject=subject, context=token.context, expires_at=token.expires_at
        )

    async def aclose(self) -> None:
        await self._by_tenant.aclose()
        await self._by_pair.aclose()
        await self._keys.aclose()


def _endpoint_tenant(audience: str, base_url: str) -> str | None:
    prefix = base_url + MCP_PATH
    if not audience.startswith(prefix):
        return None
    tenant_id = audience[len(prefix) :]
    return tenant_id if tenant_id and "/" not in tenant_id else None


def _why(exc: PyJWTError, trusted: TrustedIssuer, expected: str) -> str:
    if isinstance(exc, ExpiredSignatureError):
        return "it has expired (`exp`)"
    if isinstance(exc, ImmatureSignatureError):
        return "it is not valid yet (`nbf` or `iat` in the future)"
    if isinstance(exc, InvalidAudienceError):
        return f"its audience (`aud`) is not {expected}"
    if isinstance(exc, InvalidIssuerError):
        return f"its issuer (`iss`) is not {trusted.issuer}"
    if isinstance(exc, MissingRequiredClaimError):
        return f"it lacks the claim `{exc.claim}`"
    if isinstance(exc, InvalidSignatureError):
        return "its signature does not verify with the issuer's key"
    if isinstance(exc, InvalidAlgorithmError):
        return f"its algorithm is not the one its key is for ({exc})"
    return f"it cannot be read as a JWT ({type(exc).__name__})"


def _as_client_token(trusted: TrustedIssuer, claims: dict[str, Any]) -> ClientToken:
    subject = claims["sub"]
    if not isinstance(subject, str) or not subject:
        raise _refused("its subject (`sub`) is not a string")
    context: dict[str, Any] = {}
    for name, claim in trusted.claims.items():
        if claim not in claims:
            continue  # not bound, and not settable by the request either
        value = claims[claim]
        if not _context_value(value):
            raise _refused(
                f"its claim `{claim}` is not a string, number, boolean or list of strings"
            )
        context[name] = value
    holder = hashlib.sha256(f"{trusted.issuer}\n{subject}".encode()).hexdigest()[:16]
    return ClientToken(
        token_id=f"jwt_{holder}",  # one end user: their approvals and MCP requests are theirs
        tenant_id=trusted.tenant_id,
        context=context,
        tool_ids=None,
        tags=None,
        expires_at=_expiry(claims["exp"]),
    )


def _expiry(exp: Any) -> datetime:
    """`exp` (PyJWT checked it is a number in the future) as a time; one past the year 9999
    is the year 9999."""
    return datetime.fromtimestamp(min(float(exp), LAST_SECOND), UTC)


def _context_value(value: Any) -> bool:
    if isinstance(value, str | int | float | bool):
        return True
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _unreadable(path: str, reason: str) -> UnprocessableError:
    return UnprocessableError(
        "The identity provider cannot be used; nothing was stored.",
        errors=[field_error(path, reason)],
    )
