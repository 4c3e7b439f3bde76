"""Talking to one MCP server with the `mcp` SDK: connect, list tools, call a tool.

HTTP transports use an httpx2 client (the SDK's HTTP library) that sends through the service's
own HTTP client (`app/mcp/transport.py`), under the tenant's outbound policy when the server is
a tenant's; stdio servers (operator only) are started with the SDK's minimal environment, never
the service's own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import re
import sys
from collections.abc import AsyncIterator
from typing import Any, BinaryIO, TextIO

import httpx2
import mcp_types
import orjson
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.session import MessageHandlerFnT
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from app.mcp.config import McpServer
from app.mcp.stdio import stdio_transport
from app.mcp.transport import WireTransport
from app.tools.netguard import OutboundBlockedError, OutboundPolicy
from app.tools.outbound_client import OutboundClient
from app.tools.outcome import ToolOutcome

stderr_logger = logging.getLogger("app.mcp.stderr")
STDERR_DRAIN_S = 2.0
STDERR_LINE_BYTES = 4096

MAX_LIST_PAGES = 20
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://\S+")
# An SSE or streamable-HTTP response may stay open while a tool runs; the tool timeout bounds it.
STREAM_READ_TIMEOUT_S = 300.0
MAX_CONNECTIONS = 4  # one session's requests at once


LISTING_TOO_LARGE = "its tool list is too large"


class TooManyToolsError(Exception):
    """A server lists more tools than MCP_MAX_SERVER_TOOLS."""


class ListingCap(httpx2.AsyncBaseTransport):
    """Reads a `tools/list` answer only up to `limit` bytes, before the SDK parses it on the
    event loop (10,000 tools in one answer held the loop 0.2 s in the SDK's validation alone):
    past it, the answer is replaced by the JSON-RPC error saying so, which the SDK raises as
    that request's error (the session stays usable)."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, limit: int) -> None:
        self._inner, self._limit = inner, limit

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        request_id = None
        if request.method == "POST":
            body = await request.aread()  # a JSON-RPC message: kept for sending
            if b'"method":"tools/list"' in body:
                request_id = _request_id(body)
        response = await self._inner.handle_async_request(request)
        if request_id is None:
            return response
        kept, seen = [], 0
        try:
            async for chunk in response.aiter_raw():
                seen += len(chunk)
                if seen > self._limit:
                    break
                kept.append(chunk)
        finally:
            await response.aclose()
        content = b"".join(kept)
        if seen > self._limit:
            content = _too_large(request_id, self._limit, response.headers)
        headers = [(k, v) for k, v in response.headers.items() if k.lower() != "content-length"]
        return httpx2.Response(
            response.status_code, headers=headers, content=content, request=request
        )

    async def aclose(self) -> None:
        await self._inner.aclose()  # the inner transport owns the connections


def _request_id(body: bytes) -> Any:
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return message.get("id") if isinstance(message, dict) else None


def _too_large(request_id: Any, limit: int, headers: Any) -> bytes:
    """The JSON-RPC error that replaces a list too large, in the answer's own framing."""
    message = (
        f"{LISTING_TOO_LARGE}: more than {limit} bytes in one answer (MCP_MAX_LIST_BYTES); "
        "a server with more tools pages its list"
    )
    error = {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32603, "message": message}}
    data = orjson.dumps(error)
    if "event-stream" in headers.get("content-type", ""):
        return b"event: message\ndata: " + data + b"\n\n"
    return data


def _http_client(
    headers: dict[str, str],
    policy: OutboundPolicy | None,
    timeout_s: float,
    max_list_bytes: int | None = None,
) -> httpx2.AsyncClient:
    """The SDK's HTTP client, sending through the service's own (`app/mcp/transport.py`): a
    tenant's server under the tenant's policy, the operator's anywhere (it may be private)."""
    outbound = OutboundClient(
        policy if policy is not None else _operator_policy(),
        timeout_s=STREAM_READ_TIMEOUT_S,
        connect_timeout_s=timeout_s,
        max_connections=MAX_CONNECTIONS,
    )
    transport: httpx2.AsyncBaseTransport = WireTransport(outbound)
    if max_list_bytes is not None:
        transport = ListingCap(transport, max_list_bytes)
    return httpx2.AsyncClient(
        headers={"User-Agent": "toolgate/0.1", **headers},
        timeout=httpx2.Timeout(timeout_s, read=STREAM_READ_TIMEOUT_S),
        transport=transport,  # the trace's traceparent is added where the head is built
        follow_redirects=False,
        trust_env=False,
    )


@functools.cache
def _operator_policy() -> OutboundPolicy:
    """One policy (and TLS context: each costs 10-30 ms of CPU) for the operator's servers."""
    return OutboundPolicy.unrestricted()


@contextlib.asynccontextmanager
async def open_session(
    server: McpServer,
    *,
    headers: dict[str, str],
    policy: OutboundPolicy | None,
    timeout_s: float,
    on_message: MessageHandlerFnT | None = None,
    max_list_bytes: int | None = None,
) -> AsyncIterator[ClientSession]:
    """An initialized session; everything it opened (process, connections) closes on exit.
    `max_list_bytes`: the most bytes of a `tools/list` answer read (HTTP transports)."""
    async with contextlib.AsyncExitStack() as stack:
        if server.type == "stdio":
            assert server.command is not None
            params = StdioServerParameters(
                command=server.command, args=list(server.args), env=server.env, cwd=server.cwd
            )
            errlog = await stack.enter_async_context(stderr_to_log(server.name))
            spawn = stdio_transport if sys.platform != "win32" else stdio_client
            read, write = await stack.enter_async_context(spawn(params, errlog))
            errlog.close()  # the child has its own copy: EOF comes when it exits
        elif server.type == "streamable-http":
            assert server.url is not None
            http = await stack.enter_async_context(
                _http_client(headers, policy, timeout_s, max_list_bytes)
            )
            read, write = await stack.enter_async_context(
                streamable_http_client(server.url, http_client=http)
            )
        else:
            assert server.url is not None

            def factory(
                headers: dict[str, str] | None = None,
                timeout: httpx2.Timeout | None = None,
                auth: httpx2.Auth | None = None,
            ) -> httpx2.AsyncClient:
                return _http_client(headers or {}, policy, timeout_s, max_list_bytes)

            read, write = await stack.enter_async_context(
                sse_client(server.url, headers=headers, httpx_client_factory=factory)
            )
        session = await stack.enter_async_context(
            ClientSession(
                read, write, read_timeout_seconds=STREAM_READ_TIMEOUT_S, message_handler=on_message
            )
        )
        await session.initialize()
        yield session


@contextlib.asynccontextmanager
async def stderr_to_log(server_name: str) -> AsyncIterator[TextIO]:
    """A pipe for a stdio server's stderr whose lines go to the log (through the redacting
    formatter, labelled with the server), rather than straight to the service's stderr."""
    read_fd, write_fd = os.pipe()
    errlog = os.fdopen(write_fd, "w")
    task = asyncio.create_task(_log_lines(os.fdopen(read_fd, "rb"), server_name))
    try:
        yield errlog
    finally:
        errlog.close()
        try:
            await asyncio.wait_for(task, STDERR_DRAIN_S)
        except TimeoutError:
            pass  # a grandchild may hold the pipe open: stop reading


async def _log_lines(pipe: BinaryIO, server_name: str) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=STDERR_LINE_BYTES * 2)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    try:
        while True:
            try:
                line = await reader.readline()
            except ValueError:  # a line past the limit: take what is there
                line = await reader.read(STDERR_LINE_BYTES)
            if not line:
                return
            text = line.decode("utf-8", errors="replace").rstrip()[:STDERR_LINE_BYTES]
            if text:
                stderr_logger.info(
                    "MCP server %r: %s", server_name, text, extra={"mcp_server": server_name}
                )
    finally:
        transport.close()


async def list_all_tools(
    session: ClientSession, max_tools: int | None = None
) -> list[mcp_types.Tool]:
    """Every page of the server's list; past `max_tools` tools, `TooManyToolsError`."""
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        if max_tools is not None and len(tools) > max_tools:
            raise TooManyToolsError(
                f"it lists more than {max_tools} tools (MCP_MAX_SERVER_TOOLS); select some "
                "with the server's `include`, or raise the setting"
            )
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


_CLOSED_CONNECTION = (
    httpx2.RemoteProtocolError,
    httpx2.ReadError,
    httpx2.WriteError,
    ConnectionResetError,
    BrokenPipeError,
    ConnectionAbortedError,
)


def failure_reason(exc: BaseException) -> str:
    """A short, secret-free reason for a failed connection or call (no URLs, no headers)."""
    for inner in _chain(exc):
        if isinstance(inner, OutboundBlockedError):
            return f"blocked: {inner}"
        if isinstance(inner, TooManyToolsError):
            return str(inner)
        if LISTING_TOO_LARGE in str(inner):  # the JSON-RPC error `ListingCap` answered
            text = str(inner)
            return text[text.index(LISTING_TOO_LARGE) :]
    for inner in _chain(exc):
        if isinstance(inner, FileNotFoundError | PermissionError):
            return "the server's command could not be started"
        if isinstance(inner, httpx2.HTTPStatusError):
            return f"the server answered HTTP {inner.response.status_code}"
        if isinstance(inner, httpx2.TimeoutException | TimeoutError):
            return "the server did not answer in time"
        if isinstance(inner, httpx2.ConnectError | ConnectionRefusedError):
            return "the server refused the connection or could not be reached"
        # A connection that was open and then closed or reset: the server is (or was) there.
        if isinstance(inner, _CLOSED_CONNECTION):
            return "the server closed the connection before it answered"
        if isinstance(inner, ConnectionError):
            return "the server refused the connection or could not be reached"
    first = next(iter(_chain(exc)))
    # URLs may carry credentials in their query: never repeat one.
    detail = _URL.sub("[url]", str(first).splitlines()[0])[:200] if str(first) else ""
    return f"{type(first).__name__}: {detail}" if detail else type(first).__name__


def _chain(exc: BaseException) -> list[BaseException]:
    """The exception, the leaves of any exception group in it, and their causes."""
    seen: list[BaseException] = []
    pending = [exc]
    while pending:
        current = pending.pop(0)
        if any(current is s for s in seen):
            continue
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
            continue
        seen.append(current)
        for linked in (current.__cause__, current.__context__):
            if linked is not None:
                pending.append(linked)
    return seen or [exc]


def call_outcome(result: mcp_types.CallToolResult) -> ToolOutcome:
    """A tool result as text for the model; `isError` results become error outcomes."""
    parts = [_content_text(block) for block in result.content]
    text = "\n".join(part for part in parts if part)
    structured = result.structured_content
    if structured is not None and not any(_same_json(part, structured) for part in parts):
        # Kept alongside the text, unless a text part already says the same.
        data = orjson.dumps(structured, default=str).decode()
        text = f"{text}\n{data}" if text else data
    if result.is_error:
        return ToolOutcome.error(text or "the MCP tool reported an error", "tool_error")
    return ToolOutcome("ok", text, mcp=_native(result))


def _native(result: mcp_types.CallToolResult) -> dict[str, Any] | None:
    """The result as MCP clients of `/mcp` get it, when text alone would lose something
    (structured content, images, audio, resources, links); None for text-only results."""
    if result.structured_content is None and all(b.type == "text" for b in result.content):
        return None
    native: dict[str, Any] = {
        "content": [
            block.model_dump(by_alias=True, mode="json", exclude_none=True)
            for block in result.content
        ]
    }
    if result.structured_content is not None:
        native["structuredContent"] = result.structured_content
    return native


def _same_json(text: str, structured: dict[str, Any]) -> bool:
    """`text` says what `structured` says (servers often send both): it is the same JSON, or
    the value the SDK wraps as `{"result": ...}` (as JSON, or a plain string)."""
    if structured == {"result": text}:
        return True
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return value == structured or {"result": value} == structured


def _content_text(block: Any) -> str:
    kind = getattr(block, "type", "")
    if kind == "text":
        return str(block.text)
    if kind in ("image", "audio"):
        return f"[{kind} content: {block.mime_type}, not shown]"
    if kind == "resource_link":
        return f"[resource: {block.uri}]"
    if kind == "resource":
        resource = block.resource
        text = getattr(resource, "text", None)
        return str(text) if text is not None else f"[resource: {resource.uri}]"
    return f"[{kind or 'unknown'} content]"
