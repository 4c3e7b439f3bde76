"""MCP server entries: the operator's `mcpServers` document and what tenants register.

The operator document follows the common `mcpServers` shape:

    {"mcpServers": {"time": {"type": "stdio", "command": "mcp-server-time", "args": [...]},
                    "docs": {"type": "streamable-http", "url": "https://...", "headers": {...},
                             "tenants": ["acme"]}}}

Only operator entries may be `stdio`: a tenant can never make the service start a process.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

from app.http.outbound import reserved_header_problems
from app.schemas.fields import (
    HeaderName,
    HeaderValue,
    Name,
    ServerName,
    problem_lines,
    safe_tool_name,
)
from app.schemas.mcp import ContextMapping, McpToolName, ToolExclusion, ToolSelection, Transport

if TYPE_CHECKING:
    from app.http.netguard import OutboundPolicy

SEPARATOR = "__"


class OperatorServerEntry(BaseModel):
    """One entry of the operator's `mcpServers` document."""

    model_config = ConfigDict(extra="forbid")

    type: Transport | Literal["http"] | None = None
    command: Annotated[str, StringConstraints(min_length=1)] | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: Annotated[str, StringConstraints(pattern=r"^https?://", max_length=2048)] | None = None
    headers: dict[HeaderName, HeaderValue] = Field(default_factory=dict)
    description: str = ""
    tenants: list[Annotated[str, StringConstraints(min_length=1)]] | None = Field(
        default=None, description="Tenant ids that may use this server; absent means every tenant."
    )
    context: dict[Name, ContextMapping] = Field(default_factory=dict)
    include: list[McpToolName] | None = ToolSelection
    exclude: list[McpToolName] = ToolExclusion

    @model_validator(mode="after")
    def _transport_fields(self) -> OperatorServerEntry:
        if self.type is None:  # Claude-style stdio entries often leave the type out
            self.type = "stdio" if self.command else "streamable-http" if self.url else None
        if self.type == "http":
            self.type = "streamable-http"
        if self.type is None:
            raise ValueError("give a 'type', or a 'command' (stdio) or a 'url'")
        if self.type == "stdio":
            if not self.command or self.url:
                raise ValueError("a stdio server needs 'command' and no 'url'")
        elif not self.url or self.command:
            raise ValueError(f"a {self.type} server needs 'url' and no 'command'")
        problems = reserved_header_problems(self.headers, mcp=True)
        if problems:
            raise ValueError("; ".join(problems))
        return self


class OperatorDocument(BaseModel):
    model_config = ConfigDict(extra="forbid")

    mcpServers: dict[ServerName, OperatorServerEntry] = Field(default_factory=dict)


@dataclass(frozen=True)
class McpServer:
    """A server a chat may use, from either source, in the one shape the client code reads."""

    name: str
    type: Transport
    source: Literal["operator", "tenant"]
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    description: str = ""
    tenants: frozenset[str] | None = None
    context: dict[str, dict[str, str]] = field(default_factory=dict)
    # Changes whenever the entry does, so cached tool lists of an old entry are never used.
    revision: str = field(default_factory=lambda: uuid.uuid4().hex)
    include: frozenset[str] | None = None  # only these of its tools (None: all)
    exclude: frozenset[str] = frozenset()
    # A tenant server's outbound policy (the tenant's allow list included); set when resolved.
    policy: OutboundPolicy | None = field(default=None, compare=False, repr=False)

    def offers(self, tool: str) -> bool:
        """Whether the server's tool named `tool` (its name on the server) is offered."""
        return (self.include is None or tool in self.include) and tool not in self.exclude

    def available_to(self, tenant_id: str) -> bool:
        return self.tenants is None or tenant_id in self.tenants

    def request_headers(self, context: dict[str, Any]) -> dict[str, str]:
        """The configured headers plus context values mapped onto headers (when supplied)."""
        headers = dict(self.headers)
        for name, mapping in self.context.items():
            if "header" in mapping and name in context:
                headers[mapping["header"]] = _header_text(context[name])
        return headers

    def argument_mappings(self) -> dict[str, str]:
        """Context name -> the tool argument it fills."""
        return {name: m["argument"] for name, m in self.context.items() if "argument" in m}

    @classmethod
    def from_tenant_document(cls, doc: dict[str, Any]) -> McpServer:
        return cls(
            name=doc["name"],
            type=doc["type"],
            source="tenant",
            url=doc["url"],
            headers=dict(doc.get("headers", {})),
            description=doc.get("description", ""),
            context={k: dict(v) for k, v in doc.get("context", {}).items()},
            revision=doc["revision"],
            include=None if doc.get("include") is None else frozenset(doc["include"]),
            exclude=frozenset(doc.get("exclude", [])),
        )


def _header_text(value: Any) -> str:
    text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return text.replace("\r", " ").replace("\n", " ")


class McpConfigError(Exception):
    """The operator's MCP document is unusable; `problems` lists every reason."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(
            "invalid MCP server configuration:\n" + "\n".join(f"  - {p}" for p in problems)
        )


def parse_operator_servers(text: str | None) -> dict[str, McpServer]:
    """The operator's servers by name. Messages name fields, never values (they hold secrets)."""
    if not text or not text.strip():
        return {}
    try:
        raw = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise McpConfigError([f"not valid JSON: {exc}"]) from None
    try:
        document = OperatorDocument.model_validate(raw)
    except ValidationError as exc:
        raise McpConfigError(problem_lines(exc)) from None
    revision = hashlib.sha256(text.encode()).hexdigest()[:16]
    return {
        name: McpServer(
            name=name,
            type=entry.type,  # type: ignore[arg-type]  # normalized by the validator
            source="operator",
            url=entry.url,
            headers=dict(entry.headers),
            command=entry.command,
            args=tuple(entry.args),
            env=dict(entry.env),
            cwd=entry.cwd,
            description=entry.description,
            tenants=None if entry.tenants is None else frozenset(entry.tenants),
            context={k: v.model_dump(exclude_none=True) for k, v in entry.context.items()},
            revision=f"{revision}:{name}",
            include=None if entry.include is None else frozenset(entry.include),
            exclude=frozenset(entry.exclude),
        )
        for name, entry in document.mcpServers.items()
    }


def load_operator_servers(inline: str | None, path: str | None) -> dict[str, McpServer]:
    """From MCP_SERVERS (JSON text) or MCP_SERVERS_FILE (a path); both set is an error."""
    if inline and path:
        raise McpConfigError(["set MCP_SERVERS or MCP_SERVERS_FILE, not both"])
    if path:
        try:
            inline = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise McpConfigError([f"MCP_SERVERS_FILE cannot be read: {exc.strerror}"]) from None
    return parse_operator_servers(inline)


def server_of(tool_id: str) -> str | None:
    """The server named by a `{server}__{tool}` id; None for an id of no such shape. The one
    parser of that shape: chats, invocations and `/mcp` all read ids through it."""
    server, separator, _ = tool_id.partition(SEPARATOR)
    return server if separator and server else None


def exposed_tool_name(server: str, tool: str) -> str:
    """`{server}__{tool}`, a name model APIs accept (`safe_tool_name`); server names hold no
    `__`, so the name splits back one way."""
    return safe_tool_name(tool, prefix=f"{server}{SEPARATOR}")
