"""POST /chat: limits, pick the tenant's tools, run the loop (whole or as events), record it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import weakref
from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from app.chat.loop import ChatLoop, ChatResult, ChatRun, EventSink
from app.chat.model import ModelNotConfiguredError
from app.errors import AppError, ForbiddenError, UnprocessableError, field_error, problem_body
from app.limits import Limits, Release
from app.logs import hiding_forms
from app.mcp.config import SEPARATOR, McpServer
from app.mcp.hub import ChatSessions, mcp_server_tool
from app.metrics import Metrics
from app.repositories.database import utc_now
from app.schemas.chat import ChatRequest, ChatResponse
from app.services.catalog import ToolCatalog
from app.services.client_tokens import ClientToken
from app.services.mcp_servers import McpServerService
from app.services.outbound import TenantOutbound
from app.services.runs import RunRecorder, run_record
from app.services.secrets import SecretService
from app.tools.executors import CallScope
from app.tools.scrub import Scrubber
from app.tools.typed import ExternalTool, TypedTool

logger = logging.getLogger(__name__)
# One server-sent event (name, data), or None for a keep-alive comment.
ChatEvent = tuple[str, dict[str, Any]] | None


class ChatService:
    def __init__(
        self,
        *,
        catalog: ToolCatalog,
        loop: ChatLoop | None,
        default_model: str,
        max_iterations_cap: int,
        recorder: RunRecorder,
        limits: Limits,
        keep_messages: bool = False,
        mcp: McpServerService | None = None,
        secrets: SecretService | None = None,
        metrics: Metrics | None = None,
        outbound: TenantOutbound | None = None,
    ) -> None:
        self._outbound = outbound
        self._catalog = catalog
        self._loop = loop
        self._default_model = default_model
        self._cap = max_iterations_cap
        self._recorder = recorder
        self._limits = limits
        self._keep_messages = keep_messages
        self._mcp = mcp
        self._secrets = secrets
        self._metrics = metrics or Metrics()

    async def start(
        self, request: ChatRequest, *, tenant_id: str, token: ClientToken | None = None
    ) -> StartedChat:
        """Take a chat slot and prepare the chat: every 429/4xx/503 is raised here, before any
        run. The started chat holds the slot until it ends, however it ends."""
        release = await self._limits.admit_run(tenant_id)
        try:
            prepared = await self.prepare(request, tenant_id=tenant_id, token=token)
        except BaseException:
            release()  # nothing was answered yet: the write need not be awaited
            raise
        return StartedChat(self, prepared, tenant_id=tenant_id, release=release)

    async def prepare(
        self, request: ChatRequest, *, tenant_id: str, token: ClientToken | None = None
    ) -> ChatRun:
        """Check the request and pick its tools: every 4xx/503 is raised here, before any run.
        With a client token, only its tools are offered and its bound context values win."""
        if token is not None and request.mcp_servers:
            raise ForbiddenError(
                "A client token cannot add MCP servers to a chat; it offers its own tools only."
            )
        max_iterations = request.max_iterations or self._cap
        if max_iterations > self._cap:
            raise UnprocessableError(
                "max_iterations is above the server's cap.",
                errors=[field_error("$.max_iterations", f"must be at most {self._cap}")],
            )
        if self._loop is None:
            raise ModelNotConfiguredError(
                "No model is configured: set OPENAI_BASE_URL and/or OPENAI_API_KEY."
            )
        enabled = await self._catalog.enabled(tenant_id=tenant_id)
        if token is not None:
            enabled = [tool for tool in enabled if token.selects(tool)]
        stored_ids, mcp_ids = _split_tool_ids(request.tool_ids, enabled, self._mcp is not None)
        tools: list[TypedTool] = _selected(enabled, stored_ids, request.tags)
        context = dict(request.context_arguments)
        if token is not None:
            context.update(token.context)  # bound server-side: wins over the body
        sessions, servers, skipped = None, [], dict[str, str]()
        if (request.mcp_servers or mcp_ids) and self._mcp is not None:
            whole = await self._mcp.resolve(
                request.mcp_servers or [], tenant_id=tenant_id, path="$.mcp_servers"
            )
            # A server named in `mcp_servers` offers all its tools, whatever `tool_ids` picks.
            mcp_ids = {k: v for k, v in mcp_ids.items() if k not in {s.name for s in whole}}
            picked = await self._mcp.resolve(list(mcp_ids), tenant_id=tenant_id, path="$.tool_ids")
            servers = whole + picked
            found, skipped = await self._mcp_tools(
                servers, mcp_ids, context, taken={t.name for t in tools}, token=token
            )
            tools = tools + found
            sessions = self._mcp.hub.chat_sessions(servers, context)
        needed = set().union(*(t.secrets for t in tools))  # computed when the catalog loads
        secrets = (
            await self._secrets.resolve(needed, tenant_id=tenant_id)
            if needed and self._secrets is not None
            else {}
        )
        return ChatRun(
            messages=[m.model_dump(exclude_none=True) for m in request.messages],
            tools=tools,
            model=request.model or self._default_model,
            max_iterations=max_iterations,
            parallel_tool_calls=request.parallel_tool_calls,
            skipped_servers=skipped,
            call=CallScope(
                context=context,
                secrets=secrets,
                mcp=sessions,
                scrub=Scrubber(hidden_values(context, secrets, servers)),
                http=(
                    await self._outbound.http_client(tenant_id)
                    if self._outbound is not None
                    and any(isinstance(t, ExternalTool) for t in tools)
                    else None
                ),
            ),
        )

    async def _mcp_tools(
        self,
        servers: list[McpServer],
        picked: dict[str, set[str]],
        context: dict[str, Any],
        *,
        taken: set[str],
        token: ClientToken | None,
    ) -> tuple[list[TypedTool], dict[str, str]]:
        """The servers' tools (listed concurrently): all of a server named in `mcp_servers`,
        the picked ones of a server named only through `tool_ids`. A server that cannot be
        reached is left out with the reason; 422 for a picked tool a reachable server lacks,
        or a name that would be offered twice."""
        assert self._mcp is not None
        found: list[TypedTool] = []
        reachable, skipped = await self._mcp.hub.reachable_tools(servers, context)
        for server, listed in reachable:
            wanted = picked.get(server.name)
            tools = [mcp_server_tool(server, item) for item in listed]
            tools = [t for t in tools if token is None or token.selects(t)]
            if wanted is not None:
                missing = sorted(wanted - {t.tool_id for t in tools})
                if missing:
                    raise UnprocessableError(
                        "Some requested tools do not exist or are disabled.",
                        errors=[field_error("$.tool_ids", f"unavailable: {', '.join(missing)}")],
                    )
            for tool in tools:
                if wanted is not None and tool.tool_id not in wanted:
                    continue
                if tool.name in taken:
                    raise UnprocessableError(
                        "Two tools of this chat would have the same name.",
                        errors=[
                            field_error(
                                "$.mcp_servers",
                                f"'{tool.name}' is offered twice; rename or deselect one",
                            )
                        ],
                    )
                taken.add(tool.name)
                found.append(tool)
        return found, skipped

    async def run(
        self, chat: ChatRun, *, tenant_id: str, run_id: str, events: EventSink | None = None
    ) -> dict[str, Any]:
        """Run a prepared chat to the model's answer (or the iteration cap), and record it."""
        assert self._loop is not None, "prepare() refuses chats when no model is configured"
        progress = ChatResult(message={}, messages=[], stop_reason="completed", iterations=0)
        started = utc_now()
        status, error = "error", None
        call = chat.call
        try:
            if events is not None:
                for name, why in chat.skipped_servers.items():
                    await events("mcp_server_skipped", {"name": name, "reason": why})
            with hiding_forms(call.scrub.values):  # no log line of the run can carry them
                result = await self._loop.run(chat, events=events, progress=progress)
            status = result.stop_reason
            return {
                **_response(result),
                "run_id": run_id,
                "skipped_mcp_servers": [
                    {"name": name, "reason": reason}
                    for name, reason in chat.skipped_servers.items()
                ],
            }
        except asyncio.CancelledError:
            status = "cancelled"
            raise
        except AppError as exc:
            error = exc.message
            raise
        finally:
            # Counted and recorded first: closing MCP sessions awaits, and a cancelled chat may
            # be cancelled again while it does.
            self._metrics.chat_done(status, progress.iterations)
            record = _run_record(
                chat,
                progress,
                run_id=run_id,
                started=started,
                status=status,
                error=error,
                keep_messages=self._keep_messages,
            )
            self._recorder.record(record, tenant_id=tenant_id)
            if isinstance(call.mcp, ChatSessions):  # end, error or disconnect: nothing outlives it
                await call.mcp.aclose()


def hidden_values(
    context: Mapping[str, Any],
    secrets: Mapping[str, str | None],
    servers: Iterable[McpServer] = (),
) -> list[Any]:
    """What a run must never show or log: its context values, the secrets its tools read and
    the header values of its MCP servers (tokens, keys: a server may echo its headers)."""
    return [
        *context.values(),
        *(value for value in secrets.values() if value),
        *(value for server in servers for value in server.headers.values()),
    ]


def _split_tool_ids(
    tool_ids: list[str] | None, enabled: Sequence[TypedTool], mcp: bool
) -> tuple[list[str] | None, dict[str, set[str]]]:
    """The requested ids of stored tools, and `{server}__{tool}` ids by server name (an id of
    an enabled stored tool is always that tool)."""
    if tool_ids is None or not mcp:
        return tool_ids, {}
    stored_ids = {tool.tool_id for tool in enabled}
    stored: list[str] = []
    picked: dict[str, set[str]] = {}
    for tool_id in tool_ids:
        server, separator, _ = tool_id.partition(SEPARATOR)
        if tool_id in stored_ids or not separator or not server:
            stored.append(tool_id)
        else:
            picked.setdefault(server, set()).add(tool_id)
    return stored, picked


def _selected(
    tools: Sequence[TypedTool], tool_ids: list[str] | None, tags: list[str] | None
) -> list[TypedTool]:
    """The tools a request asks for; 422 naming any requested id that is not available."""
    tools = list(tools)
    if tool_ids is not None:
        wanted = set(tool_ids)
        tools = [t for t in tools if t.tool_id in wanted]
        missing = sorted(wanted - {t.tool_id for t in tools})
        if missing:
            raise UnprocessableError(
                "Some requested tools do not exist or are disabled.",
                errors=[field_error("$.tool_ids", f"unavailable: {', '.join(missing)}")],
            )
    if tags is not None:
        wanted_tags = set(tags)
        tools = [t for t in tools if not wanted_tags.isdisjoint(t.tags)]
    return tools


def new_run_id() -> str:
    """32 hex digits: the time in nanoseconds, then 64 random bits. Records are listed by
    (started_at, run_id), and started_at keeps milliseconds (BSON): runs that start within the
    same millisecond still list in the order they started."""
    return f"{time.time_ns():016x}{os.urandom(8).hex()}"


def _run_record(
    chat: ChatRun,
    progress: ChatResult,
    *,
    run_id: str,
    started: datetime,
    status: str,
    error: str | None,
    keep_messages: bool,
) -> dict[str, Any]:
    """What is kept of a chat: never context values; message contents only if configured."""
    tool_ids = {tool.name: tool.tool_id for tool in chat.tools}
    usage = progress.usage
    record = run_record(
        run_id=run_id,
        kind="chat",
        started=started,
        status=status,
        error=error,
        model=chat.model,
        iterations=progress.iterations,
        usage={
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        },
        tool_calls=[
            {
                "id": call.id,
                "name": call.name,
                "tool_id": tool_ids.get(call.name),
                "status": call.status,
                "duration_ms": call.duration_ms,
                "arguments": call.arguments,
            }
            for call in progress.tool_calls
        ],
    )
    if keep_messages:
        record["messages"] = progress.messages
    return record


def _response(result: ChatResult) -> dict[str, Any]:
    usage = result.usage
    return {
        "message": result.message,
        "messages": result.messages,
        "stop_reason": result.stop_reason,
        "iterations": result.iterations,
        "tool_calls": [vars(record) for record in result.tool_calls],
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        },
    }


class StartedChat:
    """A prepared chat holding one of its tenant's concurrent-chat slots: run it whole with
    `result()` or as events with `events()`; either frees the slot when the run ends."""

    def __init__(
        self,
        service: ChatService,
        chat: ChatRun,
        *,
        tenant_id: str,
        release: Release,
    ) -> None:
        self._service = service
        self._chat = chat
        self._tenant_id = tenant_id
        self._release = release
        self.run_id = new_run_id()

    async def result(self) -> dict[str, Any]:
        try:
            return await self._service.run(
                self._chat, tenant_id=self._tenant_id, run_id=self.run_id
            )
        finally:
            await self._release()  # every replica sees the slot free before the answer

    def events(self, *, keepalive_s: float) -> AsyncGenerator[ChatEvent, None]:
        """The run as events: `iteration`, `message.delta`, `tool_call`, `tool_result`, then
        `done` (the whole answer) or `error` (a problem body); None while nothing happens for
        `keepalive_s`. If the consumer stops early (the client left), the run is cancelled."""
        events = self._events(keepalive_s)
        # If the response is dropped before it ever starts, collecting the generator frees the slot.
        weakref.finalize(events, self._release)
        return events

    async def _events(self, keepalive_s: float) -> AsyncGenerator[ChatEvent, None]:
        queue: asyncio.Queue[ChatEvent | StopAsyncIteration] = asyncio.Queue()

        async def emit(name: str, data: dict[str, Any]) -> None:
            await queue.put((name, data))

        async def run() -> None:
            try:
                try:
                    result = await self._service.run(
                        self._chat, tenant_id=self._tenant_id, run_id=self.run_id, events=emit
                    )
                finally:
                    await self._release()  # every replica sees the slot free before the end
                done = ChatResponse.model_validate(result).model_dump(mode="json")
                await queue.put(("done", done))
            except AppError as exc:
                await queue.put(("error", exc.body()))
            except Exception:
                logger.exception("chat stream failed")
                await queue.put(("error", problem_body(500, "An unexpected error occurred.")))
            finally:
                await queue.put(StopAsyncIteration())

        task = asyncio.create_task(run())
        try:
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), keepalive_s)
                except TimeoutError:
                    yield None  # so proxies do not cut a stream waiting on a tool
                    continue
                if isinstance(item, StopAsyncIteration):
                    return
                yield item
        finally:
            try:
                if not task.done():  # the consumer left: cancel the model call and tools
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            finally:
                self._release()
