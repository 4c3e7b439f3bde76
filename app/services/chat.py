"""POST /chat: limits, the caller's toolset, the loop (whole or as events), the run's record."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import AsyncGenerator
from functools import partial
from typing import Any

from app.chat.approval import Decision, unanswered_calls
from app.chat.loop import ChatLoop, ChatResult, ChatRun, EventSink
from app.chat.model import ModelNotConfiguredError, ModelToolCall
from app.errors import AppError, ForbiddenError, UnprocessableError, field_error, problem_body
from app.limits.local import Limits, Release
from app.observe.logs import hiding_forms
from app.observe.metrics import Metrics
from app.observe.telemetry import agent_finished, agent_span
from app.schemas.chat import ChatRequest, ChatResponse
from app.services.approvals import ApprovalBook
from app.services.chat_record import fill_chat_record, usage_document
from app.services.chat_search import SEARCH_OFF, SearchSettings, chat_finder, chat_selection
from app.services.client_tokens import ClientToken
from app.services.model_providers import ChosenModel, ModelProviderService
from app.services.runs import RunRecorder, RunRecording, new_run_id, recording
from app.services.toolbox import Toolbox, Toolset

logger = logging.getLogger(__name__)
# One server-sent event (name, data), or None for a keep-alive comment.
ChatEvent = tuple[str, dict[str, Any]] | None


class ChatService:
    """Runs chats: takes a concurrent-chat slot, opens the caller's toolset (the toolbox decides
    which tools, context and secrets), runs the `ChatLoop` and records the run, however it ends."""

    def __init__(
        self,
        *,
        toolbox: Toolbox,
        loop: ChatLoop,
        default_model: str,
        max_iterations_cap: int,
        recorder: RunRecorder,
        limits: Limits,
        keep_messages: bool = False,
        metrics: Metrics | None = None,
        providers: ModelProviderService | None = None,
        operator_model: bool = True,
        approvals: ApprovalBook,
        search: SearchSettings = SEARCH_OFF,
    ) -> None:
        """`operator_model`: whether the operator configured a model endpoint (without one,
        only chats through a tenant's own provider run)."""
        self._toolbox = toolbox
        self._loop = loop
        self._providers = providers
        self._operator_model = operator_model
        self._default_model = default_model
        self._cap = max_iterations_cap
        self._recorder = recorder
        self._limits = limits
        self._keep_messages, self._search = keep_messages, search
        self._metrics = metrics or Metrics()
        self._approvals = approvals

    async def start(
        self, request: ChatRequest, *, tenant_id: str, token: ClientToken | None = None
    ) -> StartedChat:
        """Take a chat slot and prepare the chat: every 429/4xx/503 is raised here, before any
        run. The started chat holds the slot until it ends, however it ends."""
        release = await self._limits.admit_run(tenant_id)
        try:
            chat, toolset = await self.prepare(request, tenant_id=tenant_id, token=token)
        except BaseException:
            release()  # nothing was answered yet: the write need not be awaited
            raise
        return StartedChat(self, chat, toolset, tenant_id=tenant_id, release=release)

    async def prepare(
        self, request: ChatRequest, *, tenant_id: str, token: ClientToken | None = None
    ) -> tuple[ChatRun, Toolset]:
        """Check the request and open its toolset: every 4xx/503 is raised here."""
        max_iterations = request.max_iterations or self._cap
        if max_iterations > self._cap:
            raise UnprocessableError(
                "max_iterations is above the server's cap.",
                errors=[field_error("$.max_iterations", f"must be at most {self._cap}")],
            )
        chosen = await self._chosen_model(request, tenant_id=tenant_id)
        if token is not None:
            _token_allows(token, chosen)
        selection = chat_selection(request, self._search)
        toolset = await self._toolbox.open(
            tenant_id, selection, token=token, context=request.context_arguments
        )
        try:
            messages = [m.model_dump(exclude_none=True) for m in request.messages]
            finder = await chat_finder(toolset, messages, self._search, chosen)
            holder = token.token_id if token is not None else None
            resume, decisions = await self._resumed(request, messages, toolset, tenant_id, holder)
            hold = partial(self._approvals.hold, tenant_id=tenant_id, holder=holder)
        except BaseException:
            await toolset.aclose()
            raise
        if request.category_hints and toolset.hints.content is not None:
            messages = with_instructions(messages, toolset.hints.content)
        chat = ChatRun(
            messages=messages,
            tools=toolset.tools,
            model=chosen.model,
            max_iterations=max_iterations,
            parallel_tool_calls=request.parallel_tool_calls,
            skipped_servers=toolset.skipped_servers,
            call=toolset.call,
            client=chosen.client,
            provider=chosen.provider,
            resume=tuple(resume),
            decisions=decisions,
            hold=hold,
            search=finder,
            category_approvals=toolset.category_approvals,
            by_token=token is not None,
        )
        return chat, toolset

    async def _resumed(
        self,
        request: ChatRequest,
        messages: list[dict[str, Any]],
        toolset: Toolset,
        tenant_id: str,
        holder: str | None,
    ) -> tuple[list[ModelToolCall], dict[str, Decision]]:
        """A conversation sent back after `approval_required`: its unanswered calls and the
        person's decisions (the approval book's 422 for any that do not match)."""
        calls, modes = unanswered_calls(messages), toolset.category_approvals
        pending = self._loop.waiting(calls, toolset.tools, modes, by_token=holder is not None)
        return await self._approvals.decided(
            request.approvals, calls, pending, tenant_id=tenant_id, holder=holder
        )

    async def _chosen_model(self, request: ChatRequest, *, tenant_id: str) -> ChosenModel:
        if self._providers is None:
            chosen = ChosenModel(None, None, request.model or self._default_model)
        else:
            chosen = await self._providers.choose(
                request.provider, request.model, tenant_id=tenant_id
            )
        if chosen.client is None and not self._operator_model:
            raise ModelNotConfiguredError(
                "No model is configured: set OPENAI_BASE_URL and/or OPENAI_API_KEY, "
                "or register a model provider (/model-providers)."
            )
        return chosen

    async def run(
        self,
        chat: ChatRun,
        toolset: Toolset,
        *,
        tenant_id: str,
        run_id: str,
        events: EventSink | None = None,
    ) -> ChatResponse:
        """Run a prepared chat to the model's answer (or the iteration cap), and record it."""
        progress = ChatResult(message={}, messages=[], stop_reason="completed", iterations=0)
        try:
            # Recorded (and counted) before the toolset closes: closing MCP sessions awaits,
            # and a cancelled chat may be cancelled again while it does.
            record = partial(recording, self._recorder, kind="chat", done=self._done)
            traced = agent_span(chat, tenant_id)
            with traced as span, record(tenant_id=tenant_id, run_id=run_id) as run:
                try:
                    if events is not None:
                        for name, why in chat.skipped_servers.items():
                            await events("mcp_server_skipped", {"name": name, "reason": why})
                    with hiding_forms(chat.call.scrub.values):  # no log line can carry them
                        result = await self._loop.run(chat, events=events, progress=progress)
                    run.status = result.stop_reason
                    return _answer(result, chat, run_id=run_id)
                finally:
                    fill_chat_record(run, chat, progress, keep_messages=self._keep_messages)
                    agent_finished(span, progress, stop_reason=run.status)
        finally:  # end, error or disconnect: nothing of the toolset outlives the chat
            await toolset.aclose()

    def _done(self, run: RunRecording) -> None:
        self._metrics.chat_done(run.status, run.iterations)


def _token_allows(token: ClientToken, chosen: ChosenModel) -> None:
    """A client token limited to some providers or models: 403 for any other."""
    problem = token.refuses_model(chosen.provider, chosen.model)
    if problem is not None:
        raise ForbiddenError(problem)


def with_instructions(messages: list[dict[str, Any]], content: str) -> list[dict[str, Any]]:
    """`messages` with a system message of `content` after the caller's leading system and
    developer messages (the caller's own instructions stay first)."""
    at = 0
    while at < len(messages) and messages[at].get("role") in ("system", "developer"):
        at += 1
    return [*messages[:at], {"role": "system", "content": content}, *messages[at:]]


def _answer(result: ChatResult, chat: ChatRun, *, run_id: str) -> ChatResponse:
    return ChatResponse.model_validate(
        {
            "run_id": run_id,
            "message": result.message,
            "messages": result.messages,
            "stop_reason": result.stop_reason,
            "iterations": result.iterations,
            "tool_calls": [vars(record) for record in result.tool_calls],
            "usage": usage_document(result.usage),
            "finish_reason": result.finish_reason,
            "pending_approvals": [call.shown() for call in result.pending],
            "skipped_mcp_servers": [
                {"name": name, "reason": reason} for name, reason in chat.skipped_servers.items()
            ],
        }
    )


class StartedChat:
    """A prepared chat holding one of its tenant's concurrent-chat slots: run it whole with
    `result()` or as events with `events()`; either frees the slot when the run ends."""

    def __init__(
        self,
        service: ChatService,
        chat: ChatRun,
        toolset: Toolset,
        *,
        tenant_id: str,
        release: Release,
    ) -> None:
        self._service = service
        self._chat = chat
        self._toolset = toolset
        self._tenant_id = tenant_id
        self._release = release
        self.run_id = new_run_id()

    async def result(self) -> ChatResponse:
        try:
            return await self._service.run(
                self._chat, self._toolset, tenant_id=self._tenant_id, run_id=self.run_id
            )
        finally:
            await self._release()  # every replica sees the slot free before the answer

    def events(self, *, keepalive_s: float) -> AsyncGenerator[ChatEvent, None]:
        """The run as events: `iteration`, `message.delta`, `tool_call`, `tool_result`,
        `approval_required` (the calls waiting), then
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
                        self._chat,
                        self._toolset,
                        tenant_id=self._tenant_id,
                        run_id=self.run_id,
                        events=emit,
                    )
                finally:
                    await self._release()  # every replica sees the slot free before the end
                await queue.put(("done", result.model_dump(mode="json")))
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
