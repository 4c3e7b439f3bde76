"""`/mcp`: each tenant's tools served over MCP (streamable HTTP) with the `mcp` SDK's server.

Stateless: every request carries its bearer (tenant key or client token), no session lives in
a process, so any replica answers any request. Responses are JSON, not SSE streams.

- `tools/list`: the caller's enabled tools (a client token's selection only) with the schema a
  model sees (context parameters stripped), `title`, description and annotations; then the
  tools of the MCP servers the tenant may use, re-served as `{server}__{tool}` (a server that
  cannot be reached is left out).
- `tools/call`: through the one invocation path (limits, context merged server-side, secrets,
  scrubbing, timeout), recorded as a run of kind `mcp`. A tool's failure is an `isError`
  result; an unknown tool is a JSON-RPC error (invalid params).

An MCP client is an LLM client: it never sees context values and cannot set them. With a
client token, the token's bound values are the context; with the tenant key there is none.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import mcp.types as mcp_types
import orjson
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from app.api.problems import problem_response
from app.deps import TenantContext, authenticate, presented_bearer
from app.errors import AppError, NotFoundError, UnauthorizedError
from app.mcp.config import SEPARATOR
from app.mcp.hub import mcp_server_tool
from app.tools.typed import TypedTool

if TYPE_CHECKING:
    from app.container import Services

CALLER = "toolgate.caller"  # the scope key the handlers read the authenticated caller from
_ANNOTATIONS = {
    "read_only_hint": "readOnlyHint",
    "destructive_hint": "destructiveHint",
    "idempotent_hint": "idempotentHint",
    "open_world_hint": "openWorldHint",
}


@dataclass(frozen=True, slots=True)
class _DirectContext:
    """What the handlers read of the SDK's request context, for requests answered here."""

    request: Request


def _json_post(scope: Scope) -> tuple[bool, bool]:
    """(a JSON POST, of the protocol versions with a handshake or none said: a candidate for a
    direct answer)."""
    headers = dict(scope["headers"])
    version = headers.get(b"mcp-protocol-version")
    content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
    json_post = scope["method"] == "POST" and content_type == b"application/json"
    return json_post, json_post and (
        version is None or version.decode("latin-1") in HANDSHAKE_PROTOCOL_VERSIONS
    )


def _parsed(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None  # the SDK answers with its parse error


def _bad_request_id(message: Any) -> bool:
    """A request (it has a method) whose `id` is there but not a string or an integer: MCP
    forbids null, and JSON-RPC numbers with a fraction; the SDK would take it for a
    notification and answer 202 with nothing."""
    if not isinstance(message, dict) or "method" not in message or "id" not in message:
        return False
    request_id = message["id"]
    return not isinstance(request_id, str | int) or isinstance(request_id, bool)


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body already read, then the connection's own messages (a disconnect, in time)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _no_body() -> Message:
    return {"type": "http.disconnect"}


def _caller(ctx: Any) -> TenantContext:
    request: Request | None = ctx.request
    if request is None or CALLER not in request.scope:
        raise MCPError(mcp_types.INVALID_REQUEST, "not authenticated")
    caller: TenantContext = request.scope[CALLER]
    return caller


def served_tool(tool: TypedTool) -> mcp_types.Tool:
    """A tool as MCP clients see it: the model's schema (context parameters stripped)."""
    annotations = None
    if tool.annotations:
        annotations = mcp_types.ToolAnnotations.model_validate(
            {_ANNOTATIONS[k]: v for k, v in tool.annotations.items() if k in _ANNOTATIONS}
        )
    return mcp_types.Tool(
        name=tool.name,
        title=tool.title,
        description=tool.description or None,
        input_schema=tool.json_parameters,
        annotations=annotations,
    )


class McpGateway:
    """The ASGI endpoint: authenticate, then hand the request to the SDK's session manager."""

    def __init__(self) -> None:
        self.server: Server[Any] = Server(
            "toolgate",
            version="0.1.0",
            instructions="The tools of one toolgate tenant.",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        self._manager: StreamableHTTPSessionManager | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """For the app's lifespan: a fresh manager each time (one cannot be run twice). Its
        task group lives in a task of its own, entered and left there, whichever task runs
        the lifespan's start and end."""
        manager = StreamableHTTPSessionManager(app=self.server, stateless=True, json_response=True)
        ready, stop = asyncio.Event(), asyncio.Event()

        async def serve() -> None:
            async with manager.run():
                ready.set()
                await stop.wait()

        task = asyncio.create_task(serve(), name="mcp-endpoint")
        waiting = asyncio.create_task(ready.wait())
        await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            waiting.cancel()
            await task  # it failed to start: raise why
        self._manager = manager
        try:
            yield
        finally:
            self._manager = None
            stop.set()
            await task

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        services: Services = scope["app"].state.services
        try:
            presented = presented_bearer(Request(scope))
            scope[CALLER] = await authenticate(services, presented, client_tokens=True)
        except AppError as exc:
            headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, UnauthorizedError) else {}
            response = problem_response(exc.status_code, exc.message, headers=headers)
            await response(scope, receive, send)
            return
        if self._manager is None:
            raise RuntimeError("the MCP endpoint is not running (app lifespan not started)")
        if scope["method"] != "POST":  # stateless: no SSE stream to GET, no session to DELETE
            refused = problem_response(405, "/mcp takes POST only", headers={"Allow": "POST"})
            await refused(scope, receive, send)
            return
        json_post, direct = _json_post(scope)
        if json_post:
            body = await _read_body(receive)
            message = _parsed(body)
            if _bad_request_id(message):
                await _invalid_request(scope, send)
                return
            if direct and await self._answer_directly(scope, message, send):
                return
            receive = _replay(body, receive)
        await self._manager.handle_request(scope, receive, send)

    async def _answer_directly(self, scope: Scope, message: Any, send: Send) -> bool:
        """The two hot requests of a stateless session-less client, `tools/list` and
        `tools/call`, answered here with the same handlers and the SDK's types: the SDK's
        per-request transport (streams, task groups, a session) cost about 0.6 ms of CPU per
        call, twice the call itself (the performance section of docs/mcp.md). Anything else,
        or anything unusual about these, goes to the SDK."""
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            return False
        request_id, method = message.get("id"), message.get("method")
        if not isinstance(request_id, str | int) or isinstance(request_id, bool):
            return False
        params = message.get("params")
        ctx = _DirectContext(Request(scope))
        try:
            if method == "tools/call" and isinstance(params, dict):
                try:
                    call = mcp_types.CallToolRequestParams.model_validate(params)
                except ValidationError:
                    return False
                result: mcp_types.Result = await self._call_tool(ctx, call)
            elif method == "tools/list" and (params is None or isinstance(params, dict)):
                result = await self._list_tools(ctx, None)
            else:
                return False
            payload: dict[str, Any] = {
                "jsonrpc": "2.0",
                "id": request_id,
                "result": result.model_dump(
                    by_alias=True,
                    mode="json",
                    exclude_none=True,
                    exclude={"result_type", "ttl_ms", "cache_scope"},  # not in these versions
                ),
            }
        except MCPError as exc:
            error = exc.error.model_dump(by_alias=True, mode="json", exclude_none=True)
            payload = {"jsonrpc": "2.0", "id": request_id, "error": error}
        await Response(orjson.dumps(payload), media_type="application/json")(scope, _no_body, send)
        return True

    async def _offered(self, caller: TenantContext) -> list[TypedTool]:
        """The stored tools the caller may see and call."""
        enabled = await caller.services.catalog.enabled(tenant_id=caller.id)
        token = caller.token
        return [t for t in enabled if token is None or token.selects(t)]

    async def _list_tools(
        self, ctx: Any, params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        caller = _caller(ctx)
        tools: list[TypedTool] = list(await self._offered(caller))
        hub = caller.services.mcp_servers.hub
        servers = await caller.services.mcp_servers.usable(tenant_id=caller.id)
        context = caller.token.context if caller.token else {}
        found, _skipped = await hub.reachable_tools(servers, context)
        taken = {t.name for t in tools}
        for server, listed in found:
            for item in listed:
                tool = mcp_server_tool(server, item)
                if tool.name not in taken and (caller.token is None or caller.token.selects(tool)):
                    tools.append(tool)
        return mcp_types.ListToolsResult(tools=[served_tool(t) for t in tools])

    async def _call_tool(
        self, ctx: Any, params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        caller = _caller(ctx)
        stored = {t.name: t for t in await self._offered(caller)}
        tool = stored.get(params.name)
        if tool is None and SEPARATOR not in params.name:
            raise MCPError(mcp_types.INVALID_PARAMS, f"Unknown tool: {params.name}")
        tool_id = tool.tool_id if tool is not None else params.name
        token = caller.token
        stored_ids = {t.tool_id for t in stored.values()}

        def allowed(found: TypedTool) -> bool:  # enabled stored tools, and the token's selection
            return (found.kind == "mcp" or found.tool_id in stored_ids) and (
                token is None or token.selects(found)
            )

        try:
            result = await caller.services.invocations.call(
                tool_id,
                dict(params.arguments or {}),
                dict(token.context) if token else {},
                tenant_id=caller.id,
                kind="mcp",
                allowed=allowed,
            )
        except NotFoundError:
            raise MCPError(mcp_types.INVALID_PARAMS, f"Unknown tool: {params.name}") from None
        except AppError as exc:  # 429 past the tenant's limits, 502/504 from an MCP server
            return _error_result(exc.message)
        if result["status"] == "ok":
            return mcp_types.CallToolResult(
                content=[mcp_types.TextContent(type="text", text=result["content"] or "")]
            )
        return _error_result(result["error"]["message"])


async def _invalid_request(scope: Scope, send: Send) -> None:
    error = {"code": mcp_types.INVALID_REQUEST, "message": "id must be a string or an integer"}
    payload = {"jsonrpc": "2.0", "id": None, "error": error}
    response = Response(orjson.dumps(payload), status_code=400, media_type="application/json")
    await response(scope, _no_body, send)


def _error_result(message: str) -> mcp_types.CallToolResult:
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text=message)], is_error=True
    )
