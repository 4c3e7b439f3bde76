"""A small MCP server built with the SDK, for tests: `python -m tests.support.mcp_demo [stdio]`.

Served in-process over streamable HTTP and SSE by `McpDemoServer` (uvicorn on 127.0.0.1), or as a
child process over stdio. Its tools cover the cases the service must handle: plain results, an
error result, a hang, a large result, a crash, context arguments (argument and header), and a
tool list that changes while the server runs (`grow`).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import threading

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import (
    AudioContent,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)
from pydantic import BaseModel

from tests.support.servers import ThreadedServer

CALLS: list[str] = []  # tool names, in call order (in-process servers only)
RECEIVED: list[dict[str, str]] = []  # what `whoami` got: its argument and the X-User header
_lock = threading.Lock()


# A 1x1 PNG, base64 (what an image tool sends).
PIXEL_PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "YPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


class Weather(BaseModel):
    city: str
    celsius: float


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def build() -> MCPServer:
    server = MCPServer("demo")

    def _called(name: str) -> None:
        with _lock:
            CALLS.append(name)
        if os.environ.get("MCP_DEMO_LOG_CALLS"):  # a stdio server's calls, seen in the log
            print(f"called {name}", file=sys.stderr, flush=True)

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        _called("add")
        return a + b

    @server.tool()
    def whoami(user_id: str, ctx: Context) -> str:
        """Say which user the call is for, and which X-User header came with it."""
        _called("whoami")
        header = (ctx.headers or {}).get("x-user", "-")
        with _lock:
            RECEIVED.append({"user_id": user_id, "x-user": header})
        return f"user={user_id} header={header}"

    @server.tool()
    def complain(message: str) -> str:
        """Write `message` to stderr, as servers write their logs."""
        _called("complain")
        print(message, file=sys.stderr, flush=True)
        return "complained"

    @server.tool()
    def echo_headers(ctx: Context) -> str:
        """Answer with the request's headers, as a careless server would."""
        _called("echo_headers")
        return json.dumps(dict(ctx.headers or {}))

    @server.tool()
    def fail(reason: str) -> str:
        """Always fails with the given reason."""
        _called("fail")
        raise ValueError(f"failed on purpose: {reason}")

    @server.tool()
    async def sleep(seconds: float) -> str:
        """Sleep, then answer."""
        _called("sleep")
        await asyncio.sleep(seconds)
        return "slept"

    @server.tool()
    def big(size: int) -> str:
        """Answer with `size` characters."""
        _called("big")
        return "x" * size

    @server.tool()
    async def grow(name: str, ctx: Context) -> str:
        """Add a tool called `name` (it answers "grown") and tell the client the list changed."""
        _called("grow")
        server.add_tool(lambda: "grown", name=name, description="Added while running.")
        await ctx.session.send_tool_list_changed()
        return f"added {name}"

    @server.tool()
    def weather(city: str) -> Weather:
        """Structured output: the result has `structuredContent`, the tool an `outputSchema`."""
        _called("weather")
        return Weather(city=city, celsius=21.5)

    @server.tool()
    def picture(user_id: str) -> list[ContentBlock]:
        """Every kind of content: text, two images (one with the user id in its bytes), audio,
        an embedded resource and a resource link, the last two naming the user."""
        _called("picture")
        return [
            TextContent(type="text", text=f"a picture for {user_id}"),
            ImageContent(type="image", data=PIXEL_PNG, mime_type="image/png"),
            ImageContent(type="image", data=_b64(f"GIF89a {user_id}"), mime_type="image/gif"),
            AudioContent(type="audio", data=_b64("RIFF....WAVE"), mime_type="audio/wav"),
            EmbeddedResource(
                type="resource",
                resource=TextResourceContents(uri="memo://note", text=f"note for {user_id}"),
            ),
            ResourceLink(type="resource_link", uri=f"https://files.test/{user_id}", name="file"),
        ]

    @server.tool()
    async def steps(count: int, ctx: Context) -> str:
        """Report progress `count` times, then answer."""
        _called("steps")
        for step in range(1, count + 1):
            await ctx.report_progress(step, count, f"step {step} of {count}")
        return f"{count} steps done"

    @server.tool()
    def crash() -> str:
        """End the server's process at once (for a stdio server: it dies mid-chat)."""
        os._exit(3)

    return server


class McpDemoServer:
    """The demo server over HTTP on 127.0.0.1: `transport` is 'streamable-http' or 'sse'."""

    def __init__(
        self, transport: str, server: MCPServer | None = None, *, json_response: bool = False
    ) -> None:
        """`json_response`: answers as JSON rather than SSE streams (its connections are then
        kept alive between requests, as most servers' are)."""
        server = server or build()
        if transport == "sse":
            app, self.path = server.sse_app(), "/sse"
        else:
            app, self.path = server.streamable_http_app(json_response=json_response), "/mcp"
        self._http = ThreadedServer(app, lifespan="on")

    @property
    def url(self) -> str:
        return self._http.url + self.path

    @property
    def port(self) -> int:
        return self._http.port

    def start(self) -> McpDemoServer:
        self._http.start()
        return self

    def stop(self, *, force: bool = False) -> None:
        self._http.stop(force=force)


if __name__ == "__main__":
    if sys.argv[1:] not in ([], ["stdio"]):
        sys.exit("usage: python -m tests.support.mcp_demo [stdio]")
    build().run("stdio")
