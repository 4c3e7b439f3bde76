"""Tenants as the admin API shows them."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints

from app.schemas.fields import ClientModel

TENANT_ID_PATTERN = r"^[a-z0-9_-]{2,63}$"
TenantId = Annotated[str, StringConstraints(pattern=TENANT_ID_PATTERN)]


class TenantCreate(ClientModel):
    """A new tenant: lowercase letters, digits, '-' and '_', 2 to 63 characters."""

    tenant_id: TenantId


class Tenant(BaseModel):
    tenant_id: str
    created_at: datetime
    key_rotated_at: datetime


class TenantPage(BaseModel):
    items: list[Tenant]
    total: int
    limit: int
    offset: int


class TenantKey(BaseModel):
    """A tenant's API key. It is shown only in this response: store it now."""

    tenant_id: str
    api_key: str


class KeyRotationOptions(ClientModel):
    """`POST /tenants/{id}/keys`: what to do with the tenant's client tokens."""

    keep_client_tokens: bool = Field(
        default=False,
        description="Keep the tenant's client tokens working. By default a rotation revokes "
        "them all, since whoever held the old key may have minted some.",
    )


class RotatedTenantKey(TenantKey):
    """A tenant's new API key (shown only here), and what became of its client tokens."""

    client_tokens_revoked: int = Field(description="Client tokens revoked by this rotation.")
    client_tokens_kept: int = Field(description="Client tokens kept (keep_client_tokens).")


AllowEntry = Annotated[str, StringConstraints(min_length=1, max_length=300)]


class OutboundAllow(ClientModel):
    """A tenant's own outbound allow list, on top of the operator's policy (OUTBOUND_ALLOW,
    OUTBOUND_PORTS). Entries as in OUTBOUND_ALLOW: a host name, an address or a network, each
    optionally with `:port` (`[v6]:port`). An entry without a port lifts the public-address
    rule for that target on the open ports; with a port it opens that target on that one port
    only."""

    allow: list[AllowEntry] = Field(max_length=100)


class OutboundAllowUpdate(OutboundAllow):
    """`PUT /tenants/{id}/outbound`: the new list. Entries that open every address (`0.0.0.0/0`,
    `::/0`), the service's own host (loopback, `localhost`) or link-local addresses (cloud
    metadata) are refused unless `force` is true."""

    force: bool = Field(
        default=False,
        description="Accept entries that open every address, loopback or link-local (metadata).",
    )
