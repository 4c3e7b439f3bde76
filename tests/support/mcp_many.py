"""An MCP server with a great many tools, over streamable HTTP in a process of its own (its
answers are built there, not on the test's event loop):

    python -m tests.support.mcp_many PORT COUNT [PAGE]

`COUNT` tools named `tool_00000`...; with `PAGE`, `tools/list` answers a page of that many at a
time with `nextCursor`, else all of them in one answer.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from typing import Any

import mcp.types as mcp_types
import uvicorn
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.routing import Mount


def build(count: int, page: int | None) -> Starlette:
    tools = [
        mcp_types.Tool(
            name=f"tool_{n:05d}",
            description=f"Tool number {n}: does one thing for its caller.",
            input_schema={"type": "object", "properties": {"value": {"type": "string"}}},
        )
        for n in range(count)
    ]

    async def list_tools(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        if page is None:
            return mcp_types.ListToolsResult(tools=tools)
        start = int(params.cursor) if params is not None and params.cursor else 0
        following = str(start + page) if start + page < count else None
        return mcp_types.ListToolsResult(tools=tools[start : start + page], next_cursor=following)

    async def call_tool(ctx: Any, params: Any) -> mcp_types.CallToolResult:
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text="ok")])

    server: Server[Any] = Server("many", on_list_tools=list_tools, on_call_tool=call_tool)
    manager = StreamableHTTPSessionManager(app=server, stateless=True, json_response=True)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with manager.run():
            yield

    return Starlette(routes=[Mount("/mcp", app=manager.handle_request)], lifespan=lifespan)


if __name__ == "__main__":
    port, count = int(sys.argv[1]), int(sys.argv[2])
    page = int(sys.argv[3]) if len(sys.argv) > 3 else None
    uvicorn.run(build(count, page), host="127.0.0.1", port=port, log_level="warning")
