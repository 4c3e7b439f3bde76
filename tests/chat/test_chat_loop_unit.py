"""`ChatLoop` alone: an in-process scripted `ModelClient`, the real `ToolInvoker` and function
executor, no HTTP and no database. The loop knows no tool kind and no transport."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from app.chat.loop import ChatLoop, ChatResult, ChatRun, LoopLimits
from app.chat.model import ModelTimeoutError, ModelToolCall, ModelTurn, Usage
from app.observe.metrics import Metrics
from app.tools.executors import CallScope
from app.tools.executors.function import FunctionExecutor
from app.tools.invocation import InvocationLimits, ToolInvoker
from app.tools.scrub import Scrubber
from app.tools.typed import parse_stored_tool
from tests.support import functions


class ScriptedModel:
    """Answers each call with the next turn of its script and keeps what it was sent."""

    def __init__(self, *turns: ModelTurn) -> None:
        self.turns = list(turns)
        self.calls: list[dict[str, Any]] = []

    async def complete(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        parallel_tool_calls: bool,
        tool_choice: str = "auto",
    ) -> ModelTurn:
        self.calls.append(
            {"messages": [dict(m) for m in messages], "tools": tools, "tool_choice": tool_choice}
        )
        return self.turns.pop(0)

    async def stream(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        parallel_tool_calls: bool,
        tool_choice: str = "auto",
    ) -> AsyncIterator[str | ModelTurn]:
        turn = await self.complete(
            model=model,
            messages=messages,
            tools=tools,
            parallel_tool_calls=parallel_tool_calls,
            tool_choice=tool_choice,
        )
        for word in (turn.content or "").split(" "):
            yield word
        yield turn

    async def close(self) -> None:
        return None


def call(name: str, arguments: Any, call_id: str = "c1") -> ModelTurn:
    raw = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
    return ModelTurn(None, [ModelToolCall(call_id, name, raw)], Usage(10, 2, 12))


def answer(text: str) -> ModelTurn:
    return ModelTurn(text, [], Usage(20, 5, 25))


@pytest.fixture
def invoker() -> ToolInvoker:
    threads = ThreadPoolExecutor(max_workers=2)
    executor = FunctionExecutor(registry=functions.registry, threads=threads)
    return ToolInvoker(
        executors={"function": executor},
        limits=InvocationLimits(timeout_s=5.0, output_max_chars=1000),
        metrics=Metrics(),
    )


def profile_run(*, max_iterations: int = 5, context: dict[str, Any] | None = None) -> ChatRun:
    entry = functions.registry.get("get_profile")
    assert entry is not None
    now = datetime.now(UTC)
    _, tool = parse_stored_tool({**entry.seed_document(), "created_at": now, "updated_at": now})
    context = {"user_id": "u-7", "api_token": "tok-secret-9"} if context is None else context
    return ChatRun(
        messages=[{"role": "user", "content": "who am I?"}],
        tools=[tool],
        model="scripted",
        max_iterations=max_iterations,
        parallel_tool_calls=True,
        call=CallScope(context=context, scrub=Scrubber(list(context.values()))),
    )


async def test_a_tool_call_then_an_answer(invoker: ToolInvoker) -> None:
    model = ScriptedModel(call("get_profile", {"field": "email"}), answer("Ada"))
    loop = ChatLoop(model=model, invoker=invoker, limits=LoopLimits(deadline_s=5))
    functions.RECEIVED.clear()
    result = await loop.run(profile_run())
    assert result.stop_reason == "completed" and result.iterations == 2
    assert result.message == {"role": "assistant", "content": "Ada"}
    assert result.usage == Usage(30, 7, 37)
    assert [record.status for record in result.tool_calls] == ["ok"]
    # the context reached the function, never the model: not in the schema, not in a message
    assert functions.RECEIVED == [{"user_id": "u-7", "api_token": "tok-secret-9", "field": "email"}]
    schema = model.calls[0]["tools"][0]["function"]["parameters"]
    assert set(schema["properties"]) == {"field"}
    assert "tok-secret-9" not in orjson.dumps(model.calls).decode()
    tool_message = model.calls[1]["messages"][-1]
    assert tool_message["role"] == "tool" and tool_message["tool_call_id"] == "c1"


async def test_tool_failures_go_back_to_the_model(invoker: ToolInvoker) -> None:
    model = ScriptedModel(
        call("nope", {}, "a"),
        call("get_profile", "{not json", "b"),
        call("get_profile", {"field": 5}, "c"),
        answer("sorry"),
    )
    loop = ChatLoop(model=model, invoker=invoker, limits=LoopLimits(deadline_s=5))
    result = await loop.run(profile_run())
    assert result.stop_reason == "completed"
    assert [r.status for r in result.tool_calls] == ["error", "error", "error"]
    errors = [r.error or "" for r in result.tool_calls]
    assert "unknown tool 'nope'; available: get_profile" in errors[0]
    assert "not valid JSON" in errors[1]
    assert "invalid arguments" in errors[2]


async def test_the_iteration_cap_ends_the_loop_with_an_answer(invoker: ToolInvoker) -> None:
    model = ScriptedModel(call("get_profile", {}), answer("done"))
    loop = ChatLoop(model=model, invoker=invoker, limits=LoopLimits(deadline_s=5))
    result = await loop.run(profile_run(max_iterations=2))
    assert result.stop_reason == "max_iterations" and result.iterations == 2
    assert result.message == {"role": "assistant", "content": "done"}
    # The last turn keeps the tools (the history holds tool use) and allows no call of one.
    assert model.calls[1]["tools"] == model.calls[0]["tools"]
    assert [c["tool_choice"] for c in model.calls] == ["auto", "none"]


async def test_calls_on_the_last_turn_are_not_run_and_the_empty_answer_says_so(
    invoker: ToolInvoker,
) -> None:
    model = ScriptedModel(call("get_profile", {}, "a"), call("get_profile", {}, "b"))
    loop = ChatLoop(model=model, invoker=invoker, limits=LoopLimits(deadline_s=5))
    result = await loop.run(profile_run(max_iterations=2))
    assert (result.stop_reason, result.iterations) == ("no_answer", 2)
    assert [record.id for record in result.tool_calls] == ["a"]
    assert result.messages[-1] == {"role": "assistant", "content": ""}


async def test_the_token_budget_stops_before_paying_for_more_calls(invoker: ToolInvoker) -> None:
    model = ScriptedModel(call("get_profile", {}))
    limits = LoopLimits(deadline_s=5, token_budget=5)
    result = await ChatLoop(model=model, invoker=invoker, limits=limits).run(profile_run())
    assert result.stop_reason == "token_budget" and result.tool_calls == []


async def test_events_stream_the_answer_and_the_calls(invoker: ToolInvoker) -> None:
    model = ScriptedModel(call("get_profile", {}), answer("hello there"))
    loop = ChatLoop(model=model, invoker=invoker, limits=LoopLimits(deadline_s=5))
    seen: list[tuple[str, dict[str, Any]]] = []

    async def sink(name: str, data: dict[str, Any]) -> None:
        seen.append((name, data))

    await loop.run(profile_run(), events=sink)
    names = [name for name, _ in seen]
    assert names == [
        "iteration",
        "message.delta",
        "tool_call",
        "tool_result",
        "iteration",
        "message.delta",
        "message.delta",
    ]
    preview = next(data for name, data in seen if name == "tool_result")["preview"]
    assert "tok-secret-9" not in preview


async def test_the_deadline_is_a_model_timeout_and_progress_is_kept(
    invoker: ToolInvoker,
) -> None:
    class Stuck(ScriptedModel):
        async def complete(self, **kwargs: Any) -> ModelTurn:
            if self.turns:
                return await super().complete(**kwargs)
            await asyncio.Event().wait()  # never answers
            raise AssertionError

    model = Stuck(call("get_profile", {}))
    loop = ChatLoop(model=model, invoker=invoker, limits=LoopLimits(deadline_s=0.05))
    progress = ChatResult(message={}, messages=[], stop_reason="completed", iterations=0)
    with pytest.raises(ModelTimeoutError):
        await loop.run(profile_run(), progress=progress)
    assert progress.iterations == 1 and len(progress.tool_calls) == 1
