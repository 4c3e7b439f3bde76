"""MCP servers: what tenants register and what they get back (header values masked)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from app.http.outbound import reserved_header_problems
from app.schemas.fields import (
    ClientModel,
    Description,
    HeaderName,
    HeaderValue,
    Name,
    ServerName,
)

Transport = Literal["stdio", "sse", "streamable-http"]
MAX_HEADERS = 32
MAX_CONTEXT_MAPPINGS = 32


class ContextMapping(BaseModel):
    """Where a chat's context argument goes: an argument of every tool that has it, or a header."""

    model_config = ConfigDict(extra="forbid", strict=True)

    argument: Name | None = None
    header: HeaderName | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> ContextMapping:
        if (self.argument is None) == (self.header is None):
            raise ValueError("give exactly one of 'argument' or 'header'")
        problems = reserved_header_problems([self.header] if self.header else [], mcp=True)
        if problems:
            raise ValueError(problems[0])
        return self


McpToolName = Annotated[str, StringConstraints(min_length=1, max_length=128)]
ToolSelection: Any = Field(
    default=None,
    max_length=256,
    description="Only these of the server's tools (their names on the server); default: all.",
)
ToolExclusion: Any = Field(
    default_factory=list, max_length=256, description="Never these of the server's tools."
)


class McpServerFields(ClientModel):
    """What a tenant's server is, whether created or replaced."""

    type: Literal["streamable-http", "sse"]
    url: Annotated[str, StringConstraints(pattern=r"^https?://[^\s]+$", max_length=2048)]
    description: Description = ""
    context: dict[Name, ContextMapping] = Field(
        default_factory=dict,
        max_length=MAX_CONTEXT_MAPPINGS,
        description="Chat context arguments mapped onto a tool argument or a request header.",
    )
    include: list[McpToolName] | None = ToolSelection
    exclude: list[McpToolName] = ToolExclusion
    enabled: bool = Field(
        default=True,
        description="A disabled server stays registered, but no chat, invoke or `/mcp` "
        "listing uses its tools.",
    )

    @field_validator("headers", check_fields=False)  # each kind of body declares its own
    @classmethod
    def _not_transport_headers(cls, headers: dict[str, str] | None) -> dict[str, str] | None:
        problems = reserved_header_problems(headers or {}, mcp=True)
        if problems:
            raise ValueError("; ".join(problems))
        return headers


class McpServerCreate(McpServerFields):
    """A tenant's MCP server, reached over HTTP. (`stdio` servers are operator-only.)"""

    name: ServerName = Field(description="Prefix of the server's tools in chats: `{name}__{tool}`.")
    headers: dict[HeaderName, HeaderValue] = Field(
        default_factory=dict,
        max_length=MAX_HEADERS,
        description="Sent on every request (tokens, keys). Stored as secrets: never returned.",
    )


class McpServerUpdate(McpServerFields):
    """A tenant's MCP server replaced whole, but for its name and, when `headers` is left out,
    its stored header values (they are never shown, so a client cannot send them back)."""

    headers: dict[HeaderName, HeaderValue] | None = Field(
        default=None,
        max_length=MAX_HEADERS,
        description="Replaces every stored header; left out, the stored ones are kept (unless "
        "the URL moves to another origin: then they must be given again).",
    )


class McpServerToolSeen(BaseModel):
    tool_id: str = Field(description="As it joins a chat: `{server}__{tool}`.")
    name: str = Field(description="Its name on the server.")
    description: str


class McpServerTest(BaseModel):
    """What connecting to a server now found: its tools (as a chat would be offered them), or
    why it could not list them."""

    name: str
    ok: bool
    duration_ms: float
    tools: list[McpServerToolSeen]
    error: str | None = Field(
        default=None, description="Why the server could not be reached or did not list its tools."
    )


class McpServerOut(BaseModel):
    name: str
    type: Transport
    source: Literal["operator", "tenant"]
    url: str | None = None
    headers: dict[str, str] = Field(
        default_factory=dict, description="Header names; values are masked."
    )
    description: str = ""
    context: dict[str, dict[str, str]] = Field(default_factory=dict)
    include: list[str] | None = None
    exclude: list[str] = Field(default_factory=list)
    enabled: bool = True
    created_at: datetime | None = None
    updated_at: datetime | None = None
    warnings: list[str] | None = Field(
        default=None,
        description="At create: why `include`/`exclude` could not be checked against the "
        "server's tools (it could not be reached then).",
    )


class McpToolFunction(BaseModel):
    name: str
    description: str
    parameters: dict[str, Any]


class McpTool(BaseModel):
    """A tool of an MCP server, as it joins a chat (`{server}__{tool}`)."""

    tool_id: str
    type: Literal["mcp"] = "mcp"
    server: str
    mcp_tool: str = Field(description="The tool's name on the MCP server.")
    function: McpToolFunction
    context_parameters: list[dict[str, Any]]
    incompatible_providers: dict[str, list[str]]
