"""The MCP sessions of one run, opened on first use and closed together."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import anyio
from mcp import ClientSession, MCPError
from mcp_types import CONNECTION_CLOSED

from app.mcp.client import call_outcome, failure_reason
from app.mcp.config import McpServer
from app.mcp.hub import McpHub
from app.mcp.pool import PooledSession, hold
from app.observe.telemetry import mcp_client_span
from app.tools.outcome import ToolOutcome
from app.tools.progress import Progress, ProgressSink

logger = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 5.0


class McpSessions:
    """The MCP sessions of one run (a chat, an invocation, an MCP `tools/call`): each server's
    session taken on the run's first call to it and kept for the rest of the run; `aclose()`
    (end, error or client disconnect) gives pooled ones back and closes the run's own.

    A server whose sessions pool (`app/mcp/pool.py`) lends the tenant's pooled session; any
    other server (or a full pool) gets a session of the run's own, in a task of its own,
    because the SDK's transports use anyio scopes that must be exited by the task that entered
    them; a chat's tool calls may run in several tasks.
    """

    def __init__(
        self,
        hub: McpHub,
        servers: dict[str, McpServer],
        context: dict[str, Any],
        *,
        tenant_id: str,
    ) -> None:
        self._hub = hub
        self._servers = servers
        self._context = context
        self._tenant_id = tenant_id
        self._lent: dict[str, PooledSession] = {}  # the pooled session each server's calls use
        self._held: list[PooledSession] = []  # every lease taken, given back at the end
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
        *,
        read_only: bool = False,
    ) -> ToolOutcome:
        """Call `tool` on the server's session; with `progress`, the server is asked for
        progress notifications (a progress token) and each is passed on. A call whose session
        is lost before its answer fails with that reason; it goes once more, on a new session,
        when it is safe: the tool is `read_only` (`readOnlyHint`/`idempotentHint`), or the
        call never left (the session had already ended when it was written)."""
        for attempt in (1, 2):
            try:
                session = await self._session(server_name)
            except Exception as exc:
                return ToolOutcome.error(
                    f"cannot connect to MCP server '{server_name}': {failure_reason(exc)}",
                    "unreachable",
                )
            outcome = await self._call_on(session, server_name, tool, arguments, progress)
            if not isinstance(outcome, _Lost):
                return outcome
            if attempt == 1 and (read_only or outcome.unsent):
                logger.warning(
                    "MCP server %r: the session was lost during a call of %r: sent again on "
                    "a new session (%s)",
                    server_name,
                    tool,
                    "read-only tool" if read_only else "it had not been sent",
                )
                continue
            return ToolOutcome.error(
                f"MCP server '{server_name}' failed the call: {outcome.reason}", "unreachable"
            )
        raise AssertionError("unreachable: the second attempt returns")

    async def _call_on(
        self,
        session: ClientSession,
        server_name: str,
        tool: str,
        arguments: dict[str, Any],
        progress: ProgressSink | None,
    ) -> ToolOutcome | _Lost:
        started = time.perf_counter()
        server = self._servers[server_name]
        try:
            done: list[bool] = []  # a notification arriving after the answer is dropped
            forward = _forwarding(progress, done) if progress is not None else None
            try:
                with mcp_client_span(server=server_name, tool=tool):  # its context in `_meta`
                    result = await session.call_tool(tool, arguments, progress_callback=forward)
            finally:
                done.append(True)
        except asyncio.CancelledError:
            # Timed out or abandoned: the server may still be busy with it (a stdio server
            # stuck in a tool serves nobody), so the session is not used again.
            self._retire(server_name)
            self._hub.call_done(server, time.perf_counter() - started, "failed")
            raise
        except Exception as exc:
            self._hub.call_done(server, time.perf_counter() - started, "failed")
            if not isinstance(exc, MCPError) or exc.code == CONNECTION_CLOSED:
                self._retire(server_name)  # the session is gone: the next call reconnects
                return _Lost(server_name, exc)
            return ToolOutcome.error(
                f"MCP server '{server_name}' failed the call: {failure_reason(exc)}",
                "unreachable",
            )
        outcome = "error" if result.is_error else "ok"
        self._hub.call_done(server, time.perf_counter() - started, outcome)
        return call_outcome(result)

    async def _session(self, name: str) -> ClientSession:
        if self._closing:
            raise RuntimeError("the chat has ended")
        server = self._servers[name]
        if self._hub.pool.enabled_for(server):
            entry = await self._lease(name, server)
            if entry is not None:
                return entry.ready.result()
        owner = self._owners.get(name)
        if owner is None or owner.done():  # first call, or the last session died: (re)connect
            self._hub.runs.add(self)
            self._ready[name] = asyncio.get_running_loop().create_future()
            self._stops[name] = stop = asyncio.Event()
            self._owners[name] = asyncio.create_task(
                self._own(server, self._ready[name], stop), name=f"mcp:{name}"
            )
        return await asyncio.shield(self._ready[name])

    async def _lease(self, name: str, server: McpServer) -> PooledSession | None:
        """The run's lease on the tenant's pooled session (taken once per run and server, and
        again after the session died); None when the pool has no room."""
        entry = self._lent.get(name)
        if entry is not None and entry.alive():
            return entry
        self._hub.runs.add(self)
        headers = server.request_headers(self._context)
        key = self._hub.pool_key(self._tenant_id, server, headers)
        entry = await self._hub.pool.acquire(key, server, headers)
        if entry is not None:
            self._held.append(entry)  # every lease is given back, even a duplicate
            self._lent[name] = entry
        return entry

    def _retire(self, name: str) -> None:
        """Let a broken session close in the background; a later call opens a new one."""
        entry = self._lent.pop(name, None)
        if entry is not None:
            self._hub.pool.discard(entry)
        owner, stop = self._owners.pop(name, None), self._stops.pop(name, None)
        if stop is not None:
            stop.set()
        if owner is not None:
            self._retired.append(owner)

    async def _own(
        self, server: McpServer, ready: asyncio.Future[ClientSession], stop: asyncio.Event
    ) -> None:
        """Hold one server's session open until the run closes (or the session is retired)."""
        headers = server.request_headers(self._context)
        await hold(lambda: self._hub.session(server, headers), server.name, ready, stop)

    async def aclose(self) -> None:
        """Give back the run's pooled sessions and close its own; waits a bounded time, then
        cancels what is left."""
        self._closing = True
        for entry in self._held:
            self._hub.pool.release(entry)
        self._held.clear()
        self._lent.clear()
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


class _Lost:
    """A call whose session ended before its answer: why, and whether it never left (the SDK
    refused to write it: the session had already ended)."""

    def __init__(self, server_name: str, error: Exception) -> None:
        self.unsent = isinstance(
            error.__context__, anyio.ClosedResourceError | anyio.BrokenResourceError
        )
        if isinstance(error, MCPError) and error.code == CONNECTION_CLOSED:
            self.reason = (
                f"the session with MCP server '{server_name}' ended before its answer (the "
                "server closed the connection, or its process exited)"
            )
        else:
            self.reason = failure_reason(error)


def _forwarding(sink: ProgressSink, done: list[bool]) -> Any:
    """An SDK progress callback passing each notification on as a `Progress`, until `done`."""

    async def forward(progress: float, total: float | None, message: str | None) -> None:
        if done:
            return
        fraction = progress / total if total else None
        await sink(Progress(message or "", fraction))

    return forward
