"""MCP servers in chats: tool lists (cached, fetched concurrently) and one session set per chat.

- Tool lists: `McpHub.tools` connects to every server whose list is not cached, all at once, and
  keeps each list for MCP_TOOLS_CACHE_TTL_S; concurrent chats share one fetch per server.
- Calls: `ChatSessions` opens a server's session on the chat's first call to it, keeps it for
  the rest of the chat and closes everything in `aclose()` (end, error or client disconnect).
  Each session lives in a task of its own, because the SDK's transports use anyio scopes that
  must be exited by the task that entered them; a chat's tool calls may run in several tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import mcp_types
from mcp import ClientSession, MCPError
from mcp_types import CONNECTION_CLOSED

from app.errors import AppError
from app.mcp.client import call_outcome, failure_reason, list_all_tools, open_session
from app.mcp.config import McpServer, exposed_tool_name
from app.tools.netguard import OutboundPolicy
from app.tools.outcome import ToolOutcome
from app.tools.typed import ContextSlot, McpServerTool

logger = logging.getLogger(__name__)

CACHE_ENTRIES = 1024
CLOSE_TIMEOUT_S = 5.0
# JSON Schema keywords outside the OpenAPI subset Gemini accepts.
_GEMINI_UNSUPPORTED = (
    "$ref",
    "$defs",
    "definitions",
    "const",
    "oneOf",
    "allOf",
    "not",
    "if",
    "patternProperties",
    "additionalProperties",
    "prefixItems",
)


class McpUnavailableError(AppError):
    """A selected MCP server could not be reached or did not list its tools."""

    status_code = 502


class McpTimeoutError(AppError):
    status_code = 504


@dataclass(frozen=True)
class McpLimits:
    connect_timeout_s: float
    cache_ttl_s: float


class McpHub:
    """The process-wide part: limits, the outbound policy, the tool-list cache, open sessions."""

    def __init__(self, *, policy: OutboundPolicy, limits: McpLimits) -> None:
        self._policy = policy
        self._limits = limits
        self._cache: OrderedDict[str, tuple[float, list[mcp_types.Tool]]] = OrderedDict()
        self._inflight: dict[str, asyncio.Future[list[mcp_types.Tool]]] = {}
        self.chats: set[ChatSessions] = set()  # chats holding a session, closed at shutdown
        self.open_sessions = 0  # sessions open right now (tests and metrics read it)
        self.handshakes = 0  # sessions ever opened

    def policy_for(self, server: McpServer) -> OutboundPolicy | None:
        """Tenant servers are checked like external tools; the operator's own are trusted."""
        if server.source != "tenant":
            return None
        return server.policy or self._policy

    @contextlib.asynccontextmanager
    async def session(self, server: McpServer, headers: dict[str, str]) -> Any:
        self.handshakes += 1
        async with open_session(
            server,
            headers=headers,
            policy=self.policy_for(server),
            timeout_s=self._limits.connect_timeout_s,
        ) as session:
            self.open_sessions += 1
            try:
                yield session
            finally:
                self.open_sessions -= 1

    async def reachable_tools(
        self, servers: list[McpServer], context: dict[str, Any]
    ) -> tuple[list[tuple[McpServer, list[mcp_types.Tool]]], dict[str, str]]:
        """Each server's tools, fetched concurrently; a server that cannot be reached or times
        out is left out, with the reason (by server name) in the second part."""
        lists = await asyncio.gather(
            *(self.server_tools(s, context) for s in servers), return_exceptions=True
        )
        found: list[tuple[McpServer, list[mcp_types.Tool]]] = []
        skipped: dict[str, str] = {}
        for server, result in zip(servers, lists, strict=True):
            if isinstance(result, McpUnavailableError | McpTimeoutError):
                skipped[server.name] = result.message
            elif isinstance(result, BaseException):
                raise result
            else:
                found.append((server, result))
        return found, skipped

    async def server_tools(
        self, server: McpServer, context: dict[str, Any]
    ) -> list[mcp_types.Tool]:
        headers = server.request_headers(context)
        key = _cache_key(server, headers)
        cached = self._cache.get(key)
        if cached is not None and cached[0] > time.monotonic():
            return [t for t in cached[1] if server.offers(t.name)]
        pending = self._inflight.get(key)
        if pending is None:  # one fetch per server, however many chats start at once
            pending = asyncio.ensure_future(self._fetch(server, headers, key))
            self._inflight[key] = pending
            pending.add_done_callback(lambda _: self._inflight.pop(key, None))
        return [t for t in await asyncio.shield(pending) if server.offers(t.name)]

    async def _fetch(
        self, server: McpServer, headers: dict[str, str], key: str
    ) -> list[mcp_types.Tool]:
        try:
            async with asyncio.timeout(self._limits.connect_timeout_s):
                async with self.session(server, headers) as session:
                    tools = await list_all_tools(session)
        except TimeoutError:
            raise McpTimeoutError(
                f"MCP server '{server.name}' did not list its tools within "
                f"{self._limits.connect_timeout_s:g} s."
            ) from None
        except Exception as exc:
            logger.warning(
                "MCP server %r: listing tools failed: %s", server.name, failure_reason(exc)
            )
            raise McpUnavailableError(
                f"MCP server '{server.name}' is unavailable: {failure_reason(exc)}"
            ) from None
        if self._limits.cache_ttl_s > 0:
            self._cache[key] = (time.monotonic() + self._limits.cache_ttl_s, tools)
            self._cache.move_to_end(key)
            while len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return tools

    def forget(self, server: McpServer) -> None:
        """Drop cached lists of a server entry (it was deleted or replaced)."""
        prefix = f"{server.source}:{server.name}:{server.revision}:"
        for key in [k for k in self._cache if k.startswith(prefix)]:
            del self._cache[key]

    def chat_sessions(self, servers: list[McpServer], context: dict[str, Any]) -> ChatSessions:
        return ChatSessions(self, {s.name: s for s in servers}, context)

    async def aclose(self) -> None:
        """At shutdown: close whatever a chat still holds."""
        for chat in list(self.chats):
            await chat.aclose()


def _cache_key(server: McpServer, headers: dict[str, str]) -> str:
    # The policy's allow list too: a list fetched under a wider policy is not served under a
    # narrower one (a tenant's allow list cleared by the admin).
    allow = server.policy.allow if server.policy is not None else ()
    digest = hashlib.sha256(repr((sorted(headers.items()), allow)).encode()).hexdigest()[:16]
    return f"{server.source}:{server.name}:{server.revision}:{digest}"


class ChatSessions:
    """The MCP sessions of one chat: opened on first use, all closed by `aclose()`."""

    def __init__(self, hub: McpHub, servers: dict[str, McpServer], context: dict[str, Any]) -> None:
        self._hub = hub
        self._servers = servers
        self._context = context
        self._owners: dict[str, asyncio.Task[None]] = {}
        self._ready: dict[str, asyncio.Future[ClientSession]] = {}
        self._stops: dict[str, asyncio.Event] = {}
        self._retired: list[asyncio.Task[None]] = []
        self._closing = False

    async def call(self, server_name: str, tool: str, arguments: dict[str, Any]) -> ToolOutcome:
        try:
            session = await self._session(server_name)
        except Exception as exc:
            return ToolOutcome.error(
                f"cannot connect to MCP server '{server_name}': {failure_reason(exc)}",
                "unreachable",
            )
        try:
            result = await session.call_tool(tool, arguments)
        except Exception as exc:
            if not isinstance(exc, MCPError) or exc.code == CONNECTION_CLOSED:
                self._retire(server_name)  # the session is gone: the next call reconnects
            return ToolOutcome.error(
                f"MCP server '{server_name}' failed the call: {failure_reason(exc)}",
                "unreachable",
            )
        return call_outcome(result)

    async def _session(self, name: str) -> ClientSession:
        if self._closing:
            raise RuntimeError("the chat has ended")
        owner = self._owners.get(name)
        if owner is None or owner.done():  # first call, or the last session died: (re)connect
            self._hub.chats.add(self)
            self._ready[name] = asyncio.get_running_loop().create_future()
            self._stops[name] = stop = asyncio.Event()
            self._owners[name] = asyncio.create_task(
                self._own(name, self._ready[name], stop), name=f"mcp:{name}"
            )
        return await asyncio.shield(self._ready[name])

    def _retire(self, name: str) -> None:
        """Let a broken session close in the background; a later call opens a new one."""
        owner, stop = self._owners.pop(name, None), self._stops.pop(name, None)
        if stop is not None:
            stop.set()
        if owner is not None:
            self._retired.append(owner)

    async def _own(
        self, name: str, ready: asyncio.Future[ClientSession], stop: asyncio.Event
    ) -> None:
        """Hold one server's session open until the chat closes (or the session is retired)."""
        server = self._servers[name]
        try:
            async with self._hub.session(server, server.request_headers(self._context)) as s:
                ready.set_result(s)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else ConnectionError())
                ready.exception()  # retrieved here: a waiter may be gone already
            if not isinstance(exc, Exception):
                raise
            logger.warning("MCP server %r: session ended: %s", name, failure_reason(exc))

    async def aclose(self) -> None:
        """Close every session of the chat; waits a bounded time, then cancels what is left."""
        self._closing = True
        for stop in self._stops.values():
            stop.set()
        owners = [t for t in [*self._owners.values(), *self._retired] if not t.done()]
        try:
            if owners:
                _, pending = await asyncio.wait(owners, timeout=CLOSE_TIMEOUT_S)
                for task in pending:
                    task.cancel()
                if pending:
                    await asyncio.wait(pending, timeout=CLOSE_TIMEOUT_S)
        finally:
            self._hub.chats.discard(self)


def mcp_server_tool(server: McpServer, tool: mcp_types.Tool) -> McpServerTool:
    """An MCP tool as a typed tool: context-mapped arguments hidden from the model."""
    schema = dict(tool.input_schema or {})
    properties = dict(schema.get("properties") or {})
    required = list(schema.get("required") or [])
    context = []
    for context_name, argument in server.argument_mappings().items():
        if argument in properties:
            del properties[argument]
            context.append(ContextSlot(context_name, argument, required=argument in required))
            required = [r for r in required if r != argument]
    visible = {**schema, "type": "object", "properties": properties}
    visible.pop("title", None)
    if required:
        visible["required"] = required
    else:
        visible.pop("required", None)
    name = exposed_tool_name(server.name, tool.name)
    return McpServerTool(
        tool_id=name,
        name=name,
        description=tool.description or tool.title or "",
        parameters=None,  # the server checks its own schema
        json_parameters=visible,
        context=tuple(context),
        incompatible_providers=schema_incompatibilities(name, visible),
        title=tool.title or (tool.annotations.title if tool.annotations else None),
        annotations=_annotations(tool.annotations),
        server=server.name,
        mcp_tool=tool.name,
    )


def _annotations(annotations: mcp_types.ToolAnnotations | None) -> dict[str, bool] | None:
    """The server's hints, kept as they are (snake_case, as stored tools have them)."""
    if annotations is None:
        return None
    hints = {
        key: value
        for key, value in annotations.model_dump(exclude_none=True).items()
        if isinstance(value, bool)
    }
    return hints or None


def mcp_tool_document(tool: McpServerTool) -> dict[str, Any]:
    """What GET /mcp-servers/{name}/tools shows of a tool."""
    return {
        "tool_id": tool.tool_id,
        "type": "mcp",
        "server": tool.server,
        "mcp_tool": tool.mcp_tool,
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.json_parameters,
        },
        "context_parameters": [
            {"name": c.name, "argument": c.argument, "required": c.required} for c in tool.context
        ],
        "incompatible_providers": tool.incompatible_providers,
    }


def schema_incompatibilities(name: str, schema: dict[str, Any]) -> dict[str, list[str]]:
    """Providers that cannot take a passed-through JSON Schema as it is, and why."""
    found = sorted(_keywords(schema) & set(_GEMINI_UNSUPPORTED))
    problems: dict[str, list[str]] = {}
    if found:
        problems["gemini"] = [f"the schema uses {', '.join(found)}, which Gemini does not accept"]
    untyped = _untyped(schema)
    if untyped:
        problems.setdefault("gemini", []).append(
            f"Gemini needs a type for every parameter: {', '.join(untyped)} has none"
        )
    if not name[:1].isalpha() and name[:1] != "_":
        problems.setdefault("gemini", []).append(
            f"function name '{name}' must start with a letter or an underscore"
        )
    return problems


def _untyped(schema: dict[str, Any], path: str = "") -> list[str]:
    """Parameters (at any depth) whose schema gives no single `type`."""
    found = []
    for name, sub in (schema.get("properties") or {}).items():
        where = f"{path}{name}"
        if not isinstance(sub, dict) or not isinstance(sub.get("type"), str):
            found.append(where)
            continue
        found += _untyped(sub, f"{where}.")
        items = sub.get("items")
        if isinstance(items, dict) and items and not isinstance(items.get("type"), str):
            found.append(f"{where}[]")
    return found


def _keywords(schema: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(schema, dict):
        for key, value in schema.items():
            found.add(key)
            if key == "properties" and isinstance(value, dict):
                for sub in value.values():
                    found |= _keywords(sub)
            elif isinstance(value, dict | list):
                found |= _keywords(value)
    elif isinstance(schema, list):
        for item in schema:
            found |= _keywords(item)
    return found
