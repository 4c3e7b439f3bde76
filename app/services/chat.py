"""POST /chat: pick the tenant's tools, run the loop, shape the result."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime
from typing import Any

from app.chat.loop import ChatLoop, ChatResult, ChatRun, EventSink
from app.chat.model import ModelNotConfiguredError
from app.errors import AppError, UnprocessableError, field_error
from app.logs import hiding
from app.mcp.config import McpServer
from app.mcp.hub import prepared_tool, tool_document
from app.metrics import Metrics
from app.repositories.database import utc_now
from app.schemas.chat import ChatRequest
from app.services.catalog import ToolCatalog
from app.services.mcp_servers import McpServerService
from app.services.runs import RunRecorder
from app.services.secrets import SecretService
from app.tools.schema import PreparedTool


class ChatService:
    def __init__(
        self,
        *,
        catalog: ToolCatalog,
        loop: ChatLoop | None,
        default_model: str,
        max_iterations_cap: int,
        recorder: RunRecorder,
        keep_messages: bool = False,
        mcp: McpServerService | None = None,
        secrets: SecretService | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._catalog = catalog
        self._loop = loop
        self._default_model = default_model
        self._cap = max_iterations_cap
        self._recorder = recorder
        self._keep_messages = keep_messages
        self._mcp = mcp
        self._secrets = secrets
        self._metrics = metrics or Metrics()

    async def prepare(self, request: ChatRequest, *, tenant_id: str) -> ChatRun:
        """Check the request and pick its tools: every 4xx/503 is raised here, before any run."""
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
        tools = _selected(
            await self._catalog.enabled(tenant_id=tenant_id), request.tool_ids, request.tags
        )
        context = dict(request.context_arguments)
        sessions = None
        if request.mcp_servers and self._mcp is not None:
            servers = await self._mcp.resolve(
                request.mcp_servers, tenant_id=tenant_id, path="$.mcp_servers"
            )
            tools = tools + await self._mcp_tools(servers, context, taken={t.name for t in tools})
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
            context=context,
            model=request.model or self._default_model,
            max_iterations=max_iterations,
            parallel_tool_calls=request.parallel_tool_calls,
            mcp=sessions,
            secrets=secrets,
        )

    async def _mcp_tools(
        self, servers: list[McpServer], context: dict[str, Any], *, taken: set[str]
    ) -> list[PreparedTool]:
        """The servers' tools (listed concurrently); 422 if a name would be offered twice."""
        assert self._mcp is not None
        prepared = []
        for server, tools in await self._mcp.hub.tools(servers, context):
            for tool in tools:
                doc = tool_document(server, tool)
                if doc["function"]["name"] in taken:
                    raise UnprocessableError(
                        "Two tools of this chat would have the same name.",
                        errors=[
                            field_error(
                                "$.mcp_servers",
                                f"'{doc['function']['name']}' is offered twice; "
                                "rename or deselect one",
                            )
                        ],
                    )
                taken.add(doc["function"]["name"])
                prepared.append(prepared_tool(doc))
        return prepared

    async def run(
        self, chat: ChatRun, *, tenant_id: str, run_id: str, events: EventSink | None = None
    ) -> dict[str, Any]:
        """Run a prepared chat to the model's answer (or the iteration cap), and record it."""
        assert self._loop is not None, "prepare() refuses chats when no model is configured"
        progress = ChatResult(message={}, messages=[], stop_reason="completed", iterations=0)
        started = utc_now()
        status, error = "error", None
        hidden = [*chat.context.values(), *(v for v in chat.secrets.values() if v)]
        try:
            with hiding(hidden):  # no log line written during the run can carry them
                result = await self._loop.run(chat, events=events, progress=progress)
            status = result.stop_reason
            return {**_response(result), "run_id": run_id}
        except asyncio.CancelledError:
            status = "cancelled"
            raise
        except AppError as exc:
            error = exc.message
            raise
        finally:
            if chat.mcp is not None:  # end, error or disconnect: no process or session outlives it
                await chat.mcp.aclose()
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


def _selected(
    tools: list[PreparedTool], tool_ids: list[str] | None, tags: list[str] | None
) -> list[PreparedTool]:
    """The tools a request asks for; 422 naming any requested id that is not available."""
    if tool_ids is not None:
        wanted = set(tool_ids)
        tools = [t for t in tools if t.doc["tool_id"] in wanted]
        missing = sorted(wanted - {t.doc["tool_id"] for t in tools})
        if missing:
            raise UnprocessableError(
                "Some requested tools do not exist or are disabled.",
                errors=[field_error("$.tool_ids", f"unavailable: {', '.join(missing)}")],
            )
    if tags is not None:
        wanted_tags = set(tags)
        tools = [t for t in tools if wanted_tags.intersection(t.doc.get("tags", ()))]
    return tools


def new_run_id() -> str:
    return uuid.uuid4().hex


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
    """What is kept of a run: never context values; message contents only if configured."""
    tool_ids = {tool.name: tool.doc["tool_id"] for tool in chat.tools}
    usage = progress.usage
    record: dict[str, Any] = {
        "run_id": run_id,
        "started_at": started,
        "ended_at": utc_now(),
        "model": chat.model,
        "stop_reason": status,
        "error": error,
        "iterations": progress.iterations,
        "usage": {
            "prompt_tokens": usage.prompt_tokens,
            "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
        },
        "tool_calls": [
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
    }
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
