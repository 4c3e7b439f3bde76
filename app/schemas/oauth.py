"""toolgate's own OAuth authorization server: connect links, and the consent page's requests."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints

from app.schemas.fields import ClientModel


class ConnectLink(BaseModel):
    """A one-time link that binds the MCP client connecting at the time to a client token."""

    token_id: str
    url: str = Field(
        description="Open it in the browser that shows the client's sign-in (or paste it "
        "there): it works once, before `expires_at`."
    )
    resource: str = Field(description="The MCP server URL to add in the client.")
    expires_at: datetime


class PendingConsent(BaseModel):
    """A client's sign-in waiting for a person's consent (what the consent page shows)."""

    client_id: str
    client_name: str | None
    redirect_host: str = Field(description="Where the browser goes back to: the client's host.")
    resource: str | None = Field(description="The MCP server the client asked for, if it said.")
    expires_at: datetime


class ConsentDecision(ClientModel):
    request: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    link: Annotated[str, StringConstraints(max_length=2048)] = Field(
        default="", description="The connect link (or its code); needed to allow."
    )
    allow: bool


class ConsentAnswer(BaseModel):
    redirect_to: str = Field(description="Where the browser goes now: back to the client.")
