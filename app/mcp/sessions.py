"""The MCP sessions of one run, opened on first use and closed together."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from mcp import ClientSession, MCPError
from mcp_types import CONNECTION_CLOSED

from app.mcp.client import call_outcome, failure_reason
from app.mcp.config import McpServer
from app.mcp.hub import McpHub
from app.tools.outcome import ToolOutcome
from app.tools.progress import Progress, ProgressSink

logger = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 5.0


class McpSessions:
    """The MCP sessions of one run (a chat, an invocation, an MCP `tools/call`): each server's
    session opened on the run's first call to it, kept for the rest of the run, and all closed
    by `aclose()` (end, error or client disconnect).

    Each session lives in a task of its own, because the SDK's transports use anyio scopes that
    must be exited by the task that entered them; a chat's tool calls may run in several tasks.
    """

    def __init__(self, hub: McpHub, servers: dict[str, McpServer], context: dict[str, Any]) -> None:
        self._hub = hub
        self._servers = servers
        self._context = context
        self._owners: dict[str, asyncio.Task[None]] = {}
        self._ready: dict[str, asyncio.Future[ClientSession]] = {}
        self._stops: dict[str, asyncio.Event] = {}
        self._retired: list[asyncio.Task[None]] = []
        self._closing = False

    async def call(
        self,
        server_name: str,
        tool: str,
        arguments: dict[str, Any],
        progress: ProgressSink | None = None,
    ) -> ToolOutcome:
        """Call `tool` on the server's session; with `progress`, the server is asked for
        progress notifications (a progress token) and each is passed on."""
        try:
            session = await self._session(server_name)
        except Exception as exc:
            return ToolOutcome.error(
                f"cannot connect to MCP server '{server_name}': {failure_reason(exc)}",
                "unreachable",
            )
        try:
            done: list[bool] = []  # a notification arriving after the answer is dropped
            forward = _forwarding(progress, done) if progress is not None else None
            try:
                result = await session.call_tool(tool, arguments, progress_callback=forward)
            finally:
                done.append(True)
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
            self._hub.runs.add(self)
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
            self._hub.runs.discard(self)


def _forwarding(sink: ProgressSink, done: list[bool]) -> Any:
    """An SDK progress callback passing each notification on as a `Progress`, until `done`."""

    async def forward(progress: float, total: float | None, message: str | None) -> None:
        if done:
            return
        fraction = progress / total if total else None
        await sink(Progress(message or "", fraction))

    return forward
