"""The tool-calling loop: call the model, run the tools it asks for, feed results back, repeat.

A failing tool is a tool result the model can read and correct; only model failures and the
chat deadline end the loop with an error.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from app.chat.approval import Decision, PendingCall, parsed_arguments, waiting_calls
from app.chat.model import (
    TOOL_ERROR_PREFIX,
    ModelClient,
    ModelTimeoutError,
    ModelToolCall,
    ModelTurn,
    NativeSearch,
    PreparedTools,
    ToolChoice,
    Usage,
    malformed_answer,
)
from app.observe.logs import hiding_forms
from app.observe.metrics import Metrics
from app.observe.telemetry import model_answered, model_span
from app.schemas.tools import ApprovalMode
from app.tools.approval import ApprovalPolicy, CategoryApprovals
from app.tools.executors import CallScope
from app.tools.invocation import Invocation, ToolInvoker
from app.tools.progress import Progress, ProgressSink
from app.tools.typed import TypedTool

StopReason = Literal[
    "completed", "max_iterations", "token_budget", "approval_required", "no_answer"
]


@dataclass(frozen=True)
class LoopLimits:
    deadline_s: float
    token_budget: int = 0  # total tokens the model may report per chat; 0: no budget


@dataclass
class ToolCallRecord:
    id: str
    name: str
    arguments: Any
    status: Literal["ok", "error"]
    error: str | None
    duration_ms: float
    note: str | None = None  # why the tool's output shaping did not apply
    approval: dict[str, Any] | None = None  # the person's decision, for a call that waited
    started_ms: float | None = None  # from the run's start (`ChatResult.started`)


@dataclass
class ChatResult:
    message: dict[str, Any]
    messages: list[dict[str, Any]]
    stop_reason: StopReason
    iterations: int
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None  # the model's own, for its last turn (`model.finished`)
    pending: list[PendingCall] = field(default_factory=list)  # with approval_required
    # Each `search_tools` call: its query and the tools it revealed (the run record keeps it).
    searches: list[dict[str, Any]] = field(default_factory=list)
    # Every approval of the run: waiting calls and decisions on them (the run record keeps it).
    approvals: list[dict[str, Any]] = field(default_factory=list)
    # The run's timeline: when it started (time.perf_counter) and each model call from there.
    started: float = field(default_factory=time.perf_counter)
    model_calls: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class ChatRun:
    """One chat's inputs, already authorised and resolved to typed tools."""

    messages: list[dict[str, Any]]
    tools: list[TypedTool]
    model: str
    max_iterations: int
    parallel_tool_calls: bool
    # The caller's context values, the secrets its tools read and its MCP sessions.
    call: CallScope = field(default_factory=CallScope)
    # MCP servers left out because they could not be reached: name -> why.
    skipped_servers: dict[str, str] = field(default_factory=dict)
    # The tenant provider's client the model calls go to (None: the loop's own), and its name.
    client: ModelClient | None = None
    provider: str | None = None
    # A conversation sent back after `approval_required`: its last turn's unanswered calls run
    # first, those that waited as the person decided (by call id).
    resume: tuple[ModelToolCall, ...] = ()
    decisions: dict[str, Decision] = field(default_factory=dict)
    # Keeps the calls a chat stops for until a person decides them (before anyone hears).
    hold: Callable[[list[PendingCall]], Awaitable[None]] | None = None
    # The tenant's categories' approval settings, and whether a client token started the chat
    # (an `operator` approval is then the tenant key's decision).
    category_approvals: CategoryApprovals = field(default_factory=dict)
    by_token: bool = False
    # A chat over a large catalog: the model is offered `search.schema` too, and its calls
    # reveal more tools (app/services/chat.py, `ToolFinder`).
    search: ToolSearch | None = None


@dataclass(frozen=True)
class Found:
    """What one search revealed: the tools offered from now on, the run's scope with what
    their calls need, and the tool result the model reads."""

    tools: list[TypedTool]
    call: CallScope
    text: str


class ToolSearch(Protocol):
    """Finds more of the caller's tools for a chat (the rules are the searcher's)."""

    name: str  # the function's name, as the model calls it
    schema: dict[str, Any]  # its chat-completions declaration
    native: bool  # searched in the model API's own form (`NativeSearch`)

    async def find(self, query: str, offered: int) -> Found:
        """The best tools for `query` not offered yet; `offered`: how many the next request
        carries already (the searcher keeps it under the provider's limit)."""
        ...


EventSink = Callable[[str, dict[str, Any]], Awaitable[None]]
PREVIEW_CHARS = 200


@dataclass
class _Run:
    """One chat's working state, shared by the steps of the loop."""

    chat: ChatRun
    by_name: dict[str, TypedTool]
    emit: EventSink | None
    started: float  # the run's start (time.perf_counter): calls are placed from it
    schemas: list[dict[str, Any]] | None = None  # what the next model call offers
    call: CallScope | None = None  # the run's scope (grows as searches reveal tools)
    searches: list[dict[str, Any]] | None = None
    revealing: asyncio.Lock | None = None  # one search reveals at a time
    revealed: list[TypedTool] = field(default_factory=list)  # by searches, in order
    native: NativeSearch | None = None  # the search in the model API's own form


class ChatLoop:
    def __init__(
        self,
        *,
        model: ModelClient,
        invoker: ToolInvoker,
        limits: LoopLimits,
        metrics: Metrics | None = None,
        approvals: ApprovalPolicy | None = None,
    ) -> None:
        self._model = model
        self._invoker = invoker
        self._limits = limits
        self._metrics = metrics or Metrics()
        self._approvals = approvals or ApprovalPolicy()

    def waiting(
        self,
        calls: list[ModelToolCall],
        tools: list[TypedTool] | dict[str, TypedTool],
        categories: CategoryApprovals | None = None,
        *,
        by_token: bool = False,
    ) -> list[PendingCall]:
        """The calls among `calls` that wait for a person's approval before they run."""
        by_name = tools if isinstance(tools, dict) else {tool.name: tool for tool in tools}

        def mode(tool: TypedTool) -> ApprovalMode:
            return self._approvals.mode(tool, categories)

        return waiting_calls(calls, by_name, mode, by_token=by_token)

    def _waiting(self, calls: list[ModelToolCall], run: _Run) -> list[PendingCall]:
        chat = run.chat
        return self.waiting(calls, run.by_name, chat.category_approvals, by_token=chat.by_token)

    async def run(
        self,
        chat: ChatRun,
        *,
        events: EventSink | None = None,
        progress: ChatResult | None = None,
    ) -> ChatResult:
        """Run to the model's answer. With `events`, progress is reported as it happens and the
        model is asked to stream (`message.delta` events carry its content as it arrives).
        `progress`, if given, is filled as the run goes, so a failed run still shows its steps."""
        result = progress or ChatResult(
            message={}, messages=[], stop_reason="completed", iterations=0
        )
        try:
            async with asyncio.timeout(self._limits.deadline_s):
                return await self._run(chat, events, result)
        except TimeoutError:
            raise ModelTimeoutError(
                f"The chat did not finish within its deadline of {self._limits.deadline_s:g} s."
            ) from None

    async def _run(self, chat: ChatRun, events: EventSink | None, result: ChatResult) -> ChatResult:
        extra = [chat.search.schema] if chat.search is not None else []
        run = _Run(chat, {tool.name: tool for tool in chat.tools}, events, result.started)
        run.native = _native(chat.search)
        offered = PreparedTools.of(chat.tools, extra, run.native)  # each tool's JSON made once
        run.schemas, run.call, run.searches = offered or None, chat.call, result.searches
        messages = result.messages
        messages.extend(chat.messages)
        if chat.resume:
            await self._resume(run, result)
        for iteration in range(1, chat.max_iterations + 1):
            last = iteration == chat.max_iterations
            if events:
                await events("iteration", {"n": iteration})
            schemas = run.schemas  # searches of the last turn may have added tools
            started, turn = time.perf_counter(), None
            try:
                # The last turn keeps the tools (a tool-use history without them is refused by
                # Anthropic) and forbids calling one: the model must answer.
                turn = await self._call_model(run, messages, schemas, "none" if last else "auto")
            finally:
                self._metrics.model_seconds.observe(time.perf_counter() - started)
                result.model_calls.append(_model_call(result.started, started, turn))
            result.iterations, result.usage = iteration, result.usage + turn.usage
            result.finish_reason = turn.finish
            # Tool calls are read from the message, not finish_reason: some gateways say "stop".
            over_budget = 0 < self._limits.token_budget < result.usage.total_tokens
            if last or not turn.tool_calls or over_budget:
                result.message = {"role": "assistant", "content": turn.content or ""}
                result.stop_reason = _stop_reason(turn, last=last and bool(schemas))
                if over_budget and turn.tool_calls and not last:
                    result.stop_reason = "token_budget"  # calls the budget no longer pays for
                messages.append(result.message)
                return result
            messages.append(_assistant_tool_message(turn.content, turn.tool_calls))
            pending = self._waiting(turn.tool_calls, run)
            if pending:  # none of the turn's calls runs before a person decides
                return await self._stop_for_approval(run, result, pending)
            await self._answer_calls(turn.tool_calls, run, result, {})
        raise AssertionError("unreachable: the last iteration always returns")

    async def _answer_calls(
        self,
        calls: list[ModelToolCall],
        run: _Run,
        result: ChatResult,
        decisions: dict[str, Decision],
    ) -> None:
        records = await self._run_calls(calls, run, decisions)
        for call, (record, content) in zip(calls, records, strict=True):
            result.tool_calls.append(record)
            result.messages.append({"role": "tool", "tool_call_id": call.id, "content": content})

    async def _resume(self, run: _Run, result: ChatResult) -> None:
        """Run the unanswered calls of the conversation sent back, as the person decided."""
        calls, decisions = list(run.chat.resume), run.chat.decisions
        for pending in self._waiting(calls, run):
            decision = decisions[pending.id]  # the service refused a conversation without it
            verdict = "approved" if decision.approved else "refused"
            result.approvals.append(
                {**_recorded_pending(pending), "decision": verdict, "reason": decision.reason}
            )
        await self._answer_calls(calls, run, result, decisions)

    async def _stop_for_approval(
        self, run: _Run, result: ChatResult, pending: list[PendingCall]
    ) -> ChatResult:
        result.stop_reason = "approval_required"
        result.message = result.messages[-1]
        result.pending = pending
        result.approvals += [{**_recorded_pending(p), "decision": "pending"} for p in pending]
        if run.chat.hold is not None:
            await run.chat.hold(pending)
        if run.emit:
            await run.emit("approval_required", {"pending": [p.shown() for p in pending]})
        return result

    async def _call_model(
        self,
        run: _Run,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        choice: ToolChoice,
    ) -> ModelTurn:
        scrub, streamed = run.chat.call.scrub, run.emit is not None
        with model_span(
            model=run.chat.model, stream=streamed, messages=messages, scrub=scrub
        ) as span:
            turn = await self._model_turn(run, messages, tools, choice)
            model_answered(span, turn, scrub=scrub)
            return turn

    async def _model_turn(
        self,
        run: _Run,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        choice: ToolChoice,
    ) -> ModelTurn:
        client = run.chat.client or self._model
        request: dict[str, Any] = {
            "model": run.chat.model,
            "messages": messages,
            "tools": tools,
            "parallel_tool_calls": run.chat.parallel_tool_calls,
        }
        if choice != "auto":  # only when it says something: a client may predate the field
            request["tool_choice"] = choice
        if run.emit is None:
            return await client.complete(**request)
        turn = None
        stream = client.stream(**request)
        async for item in stream:
            if isinstance(item, str):
                await run.emit("message.delta", {"content": item})
            else:
                turn = item
        if turn is None:
            raise malformed_answer()
        return turn

    async def _run_calls(
        self, calls: list[ModelToolCall], run: _Run, decisions: dict[str, Decision]
    ) -> list[tuple[ToolCallRecord, str]]:
        if run.chat.parallel_tool_calls and len(calls) > 1:
            return list(
                await asyncio.gather(
                    *(self._run_call(call, run, decisions.get(call.id)) for call in calls)
                )
            )
        return [await self._run_call(call, run, decisions.get(call.id)) for call in calls]

    async def _run_call(
        self, call: ModelToolCall, run: _Run, decision: Decision | None = None
    ) -> tuple[ToolCallRecord, str]:
        started = time.perf_counter()
        tool = run.by_name.get(call.name)
        search = run.chat.search
        if tool is None and search is not None and call.name == search.name:
            return await self._search(call, run, search, started)
        arguments, parse_error = parsed_arguments(call, tool)
        shown = arguments if parse_error is None else call.arguments
        if run.emit:
            await run.emit("tool_call", {"id": call.id, "name": call.name, "arguments": shown})
        scope = run.call or run.chat.call
        if tool is None:
            known = ", ".join(sorted(run.by_name)) or "none"
            problem = (
                f"unknown tool '{call.name}'; available: {known}"
                if call.name
                else "the tool call has no function name"
            )
            result = self._invoker.refused(
                problem, "unknown_tool", scope, call_id=call.id, name=call.name
            )
        elif parse_error is not None:
            result = self._invoker.refused(
                parse_error, "invalid_arguments", scope, tool, call_id=call.id
            )
        elif decision is not None and not decision.approved:
            why = f": {decision.reason}" if decision.reason else ""
            refusal = f"a person refused this call{why}"
            result = self._invoker.refused(refusal, "refused", scope, tool, call_id=call.id)
        else:
            watcher = _progress_events(run.emit, call.id) if run.emit else None
            # A revealed tool's hidden values are kept out of log lines too.
            hiding = hiding_forms(scope.scrub.values) if scope is not run.chat.call else None
            with hiding or nullcontext():
                result = await self._invoker.invoke(
                    tool, arguments, scope, progress=watcher, call_id=call.id
                )
        record, content = _recorded(call, shown, result, time.perf_counter() - started)
        record.started_ms = _ms(started - run.started)
        if decision is not None:
            record.approval = decision.shown()
        if run.emit:
            await run.emit(
                "tool_result",
                {
                    "id": call.id,
                    "status": record.status,
                    "duration_ms": record.duration_ms,
                    "preview": content[:PREVIEW_CHARS],
                },
            )
        return record, content

    async def _search(
        self, call: ModelToolCall, run: _Run, search: ToolSearch, started: float
    ) -> tuple[ToolCallRecord, str]:
        """A `search_tools` call: the tools found join the next model call (and `by_name`, so
        their calls run through every rule, approval included)."""
        query, problem = _search_query(call.arguments)
        if run.emit:
            shown = {"query": query} if problem is None else call.arguments
            await run.emit("tool_call", {"id": call.id, "name": call.name, "arguments": shown})
        if problem is not None:
            refused = self._invoker.refused(problem, "invalid_arguments", run.call or CallScope())
            return _recorded(call, call.arguments, refused, time.perf_counter() - started)
        if run.revealing is None:
            run.revealing = asyncio.Lock()
        async with run.revealing:  # parallel searches reveal one after the other
            found = await search.find(query, len(run.schemas or ()))
            new = [tool for tool in found.tools if tool.name not in run.by_name]
            run.by_name.update((tool.name, tool) for tool in new)
            run.revealed += new
            if run.native is not None:
                run.native.revealed[call.id] = [tool.schema for tool in new]
            offered = [*run.chat.tools, *run.revealed]
            run.schemas = PreparedTools.of(offered, [search.schema], run.native)
            run.call = found.call
        if run.searches is not None:
            run.searches.append({"query": query, "revealed": [tool.name for tool in new]})
        seconds = time.perf_counter() - started
        record = ToolCallRecord(call.id, call.name, {"query": query}, "ok", None, seconds * 1000)
        if run.emit:
            preview = found.text[:PREVIEW_CHARS]
            shown_ms = round(seconds * 1000, 3)
            await run.emit(
                "tool_result",
                {"id": call.id, "status": "ok", "duration_ms": shown_ms, "preview": preview},
            )
        return record, found.text


def _native(search: ToolSearch | None) -> NativeSearch | None:
    if search is None or not search.native:
        return None
    function = search.schema["function"]
    return NativeSearch(search.name, function["description"], function["parameters"])


def _search_query(arguments: str) -> tuple[str, str | None]:
    """The query of a `search_tools` call, or why there is none."""
    try:
        parsed = json.loads(arguments or "{}")
    except ValueError:
        return "", 'the arguments are not JSON; send {"query": "service and action"}'
    query = parsed.get("query") if isinstance(parsed, dict) else None
    if not isinstance(query, str) or not query.strip():
        return "", "'query' must be a non-empty string: the service and the action"
    return query.strip(), None


def _stop_reason(turn: ModelTurn, *, last: bool) -> StopReason:
    """Why a chat ends on `turn`, the model's answer: `no_answer` when it carries no text (at
    the iteration cap, a model that still asked for tools; its calls are not run)."""
    if not turn.content:
        return "no_answer"
    return "max_iterations" if last else "completed"


def _recorded(
    call: ModelToolCall, shown: Any, result: Invocation, seconds: float
) -> tuple[ToolCallRecord, str]:
    """The call's record and the tool message the model reads (errors say so)."""
    content = result.content if result.status == "ok" else TOOL_ERROR_PREFIX + result.content
    record = ToolCallRecord(
        id=call.id,
        name=call.name,
        arguments=shown,
        status=result.status,
        error=content if result.status == "error" else None,
        duration_ms=round(seconds * 1000, 3),
        note=result.note,
    )
    return record, content


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def _model_call(run_started: float, started: float, turn: ModelTurn | None) -> dict[str, Any]:
    """A model call on the run's timeline; without a turn it failed (or was cancelled)."""
    call: dict[str, Any] = {
        "started_ms": _ms(started - run_started),
        "duration_ms": _ms(time.perf_counter() - started),
        "status": "ok" if turn is not None else "error",
    }
    if turn is not None:
        call["total_tokens"] = turn.usage.total_tokens
    return call


def _progress_events(emit: EventSink, call_id: str) -> ProgressSink:
    """A call's progress reports as `tool_progress` events (the model never sees them)."""

    async def report(step: Progress) -> None:
        await emit(
            "tool_progress", {"id": call_id, "message": step.message, "fraction": step.fraction}
        )

    return report


def _recorded_pending(call: PendingCall) -> dict[str, Any]:
    return {"call_id": call.id, "tool": call.tool, "arguments": call.arguments}


def _assistant_tool_message(content: str | None, calls: list[ModelToolCall]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ],
    }
