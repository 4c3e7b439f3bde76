"""Client tokens: what a frontend hands one end user's agent instead of the tenant key."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field, StringConstraints

from app.schemas.chat import ContextArguments
from app.schemas.fields import ClientModel, Name, Tag, WholeNumber
from app.schemas.model_providers import ModelName

TokenName = Annotated[str, StringConstraints(min_length=1, max_length=100)]
MAX_LIFETIME_S = 366 * 86_400


class ClientTokenCreate(ClientModel):
    """A token that opens `/mcp`, `/chat` and invoke (never the CRUD routes) for one client."""

    name: TokenName = Field(description="Who it is for, as you will recognise it in the list.")
    context_arguments: ContextArguments = Field(
        default_factory=dict,
        description="Context values bound to the token: they win over anything a request sends "
        "and are never shown again (nor to the client or its model).",
    )
    settable_context: list[Name] = Field(
        default_factory=list,
        max_length=64,
        description="Context parameters a request made with this token may set itself (in "
        "`context_arguments`). Default: none, every hidden value comes from the token, and a "
        "request that sends any other context value is refused (422).",
    )
    tool_ids: list[Name] | None = Field(
        default=None,
        max_length=256,
        description="The tools it may see and call; with `tags`, a tool matching either.",
    )
    tags: list[Tag] | None = Field(
        default=None, max_length=32, description="Tools with at least one of these tags."
    )
    providers: list[Name] | None = Field(
        default=None,
        max_length=64,
        description="The tenant's model providers its chats may go through (then not the "
        "operator's endpoint); default: any.",
    )
    models: list[ModelName] | None = Field(
        default=None, max_length=64, description="The models its chats may use; default: any."
    )
    tool_search: bool | None = Field(
        default=None,
        description="`/mcp` lists the `default` category's tools and a `search_tools` tool that "
        "finds the others (for clients without a search of their own, over large catalogs); "
        "false: the plain listing; default: MCP_TOOL_SEARCH.",
    )
    expires_in_s: Annotated[int, Field(ge=60, le=MAX_LIFETIME_S), WholeNumber] | None = Field(
        default=None,
        description="Lifetime in seconds (60 to 366 days); default: until revoked.",
    )


class ClientToken(BaseModel):
    token_id: str
    name: str
    context_names: list[str] = Field(description="The bound context arguments (values hidden).")
    settable_context: list[str] = Field(
        default_factory=list, description="Context parameters its requests may set themselves."
    )
    tool_ids: list[str] | None
    tags: list[str] | None
    providers: list[str] | None = None
    models: list[str] | None = None
    tool_search: bool | None = None
    created_at: datetime
    expires_at: datetime | None


class ClientTokenCreated(ClientToken):
    token: str = Field(description="The token itself (tgc_...): shown only here, store it now.")
