"""A tenant's trusted identity provider (`PUT /identity`): whose JWTs stand for its end users,
and which of their claims become context values."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field, StringConstraints

from app.schemas.chat import ContextValue
from app.schemas.fields import ClientModel, Name

# Asymmetric algorithms only: a key of a JWKS is public, so an HMAC "signed" with it proves
# nothing, and `none` signs nothing.
Algorithm = Literal[
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"
]
DEFAULT_ALGORITHMS: list[Algorithm] = ["RS256", "ES256"]
MAX_URL = 2048
HttpUrlText = Annotated[
    str, StringConstraints(pattern=r"^https?://[^\s]+$", min_length=8, max_length=MAX_URL)
]
# A claim's name as the token carries it: `sub`, `org_id`, or a namespaced `https://x.io/org`.
ClaimName = Annotated[
    str, StringConstraints(pattern=r"^[^\x00-\x1f\x7f]+$", min_length=1, max_length=256)
]
Audience = Annotated[
    str, StringConstraints(pattern=r"^[^\x00-\x1f\x7f\s]+$", min_length=1, max_length=MAX_URL)
]


class IdentityPut(ClientModel):
    """The tenant's identity provider. Its JWTs are accepted wherever a client token is."""

    issuer: HttpUrlText = Field(
        description="The `iss` its tokens carry, exactly (for example https://acme.okta.com)."
    )
    jwks_uri: HttpUrlText | None = Field(
        default=None,
        description="Where its signing keys are; default: the `jwks_uri` of the issuer's "
        "/.well-known/openid-configuration, read now.",
    )
    audience: Audience | None = Field(
        default=None,
        description="The `aud` its tokens must carry; default: the URL of this tenant's MCP "
        "endpoint (/mcp/{tenant_id}, RFC 8707), as a client connecting by URL asks for it.",
    )
    claims: dict[Name, ClaimName] = Field(
        default_factory=dict,
        max_length=64,
        description='Context parameter name -> claim name: {"user_id": "sub", "org": '
        '"org_id"}. The values are bound as a client token binds its context: a request '
        "cannot set or override them.",
    )
    required_claims: list[ClaimName] = Field(
        default_factory=list,
        max_length=32,
        description="Claims a token must carry to be accepted (besides `iss`, `aud`, `exp` "
        "and `sub`, always required).",
    )
    algorithms: list[Algorithm] = Field(
        default_factory=lambda: list(DEFAULT_ALGORITHMS),
        min_length=1,
        max_length=10,
        description="The signature algorithms accepted (asymmetric only).",
    )


class IdentityConfig(BaseModel):
    """The stored configuration, as `GET /identity` shows it."""

    issuer: str
    jwks_uri: str
    jwks_discovered: bool = Field(description="Whether `jwks_uri` came from OIDC discovery.")
    audience: str | None = Field(
        description="None: the URL of the tenant's MCP endpoint (/mcp/{tenant_id})."
    )
    claims: dict[str, str]
    required_claims: list[str]
    algorithms: list[str]
    created_at: datetime
    updated_at: datetime


class TokenTestRequest(ClientModel):
    token: Annotated[str, StringConstraints(min_length=1, max_length=16_384)] = Field(
        description="A JWT as a client would send it (without `Bearer `)."
    )


class TokenTest(BaseModel):
    """What a token would bind, checked exactly as a request's token is (signature included)."""

    accepted: bool
    reason: str | None = Field(default=None, description="Why it would be refused (a 401).")
    subject: str | None = None
    context: dict[str, ContextValue] = Field(
        default_factory=dict, description="The context values it would bind."
    )
    expires_at: datetime | None = None
