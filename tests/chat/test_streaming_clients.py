"""Both model clients consume a streaming chat-completions endpoint the same way."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from app.chat.http_model_client import HTTPModelClient
from app.chat.model import ModelClient, ModelTurn, ModelUpstreamError, TurnAssembler
from tests.support import fake_model as script
from tests.support.fake_model import FakeModel
from tests.support.fixtures.chat import MODEL_CLIENTS
from tests.support.servers import ThreadedServer


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[FakeModel, ThreadedServer]]:
    fake = FakeModel()
    server = ThreadedServer(fake).start()
    yield fake, server
    server.stop()


@pytest.fixture(params=MODEL_CLIENTS)
async def client(request: pytest.FixtureRequest, served: tuple[FakeModel, ThreadedServer]):  # type: ignore[no-untyped-def]
    if request.param == "http":
        kind: Any = HTTPModelClient
    else:  # imported here: the `openai` package is 1 s of imports at collection
        from app.chat.openai_sdk import OpenAISDKClient as kind
    model = kind(base_url=f"{served[1].url}/v1", api_key="k", timeout_s=5, max_retries=1)
    yield model
    await model.close()


async def _collect(
    client: ModelClient, tools: list[dict[str, Any]] | None = None
) -> tuple[list[str], ModelTurn]:
    deltas: list[str] = []
    turn = None
    async for item in client.stream(
        model="m",
        messages=[{"role": "user", "content": "x"}],
        tools=tools,
        parallel_tool_calls=True,
    ):
        if isinstance(item, str):
            deltas.append(item)
        else:
            turn = item
    assert turn is not None
    return deltas, turn


async def test_content_arrives_as_deltas(client: ModelClient, served: Any) -> None:
    fake: FakeModel = served[0]
    fake.reset(script.streamed_text("Hel", "lo, ", "wor", "ld"))
    deltas, turn = await _collect(client)
    assert deltas == ["Hel", "lo, ", "wor", "ld"]
    assert turn.content == "Hello, world" and turn.tool_calls == []
    assert (turn.usage.prompt_tokens, turn.usage.total_tokens) == (7, 10)
    sent = fake.requests[0]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


async def test_fragmented_interleaved_tool_calls_are_assembled(
    client: ModelClient, served: Any
) -> None:
    fake: FakeModel = served[0]
    first = orjson.dumps({"city": "Paris", "days": [1, 2, 3]}).decode()
    second = orjson.dumps({"expression": "(2 + 3) * 4"}).decode()
    fake.reset(
        script.streamed_tool_calls(
            ("call_a", "get_weather", first), ("call_b", "calculate", second), piece=2
        )
    )
    deltas, turn = await _collect(client)
    assert deltas == []
    assert [(c.id, c.name, c.arguments) for c in turn.tool_calls] == [
        ("call_a", "get_weather", first),
        ("call_b", "calculate", second),
    ]


async def test_error_status_before_the_stream_is_retried_then_reported(
    client: ModelClient, served: Any
) -> None:
    fake: FakeModel = served[0]
    fake.reset(script.status(500), script.streamed_text("ok"))
    _, turn = await _collect(client)
    assert turn.content == "ok" and len(fake.requests) == 2
    fake.reset(repeat=script.status(500))
    with pytest.raises(ModelUpstreamError, match="HTTP 500"):
        await _collect(client)


def test_assembler_takes_names_sent_whole_or_in_pieces() -> None:
    assembler = TurnAssembler()
    for chunk in [
        {
            "choices": [
                {"delta": {"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "get_"}}]}}
            ]
        },
        {
            "choices": [
                {
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "function": {"name": "weather", "arguments": "{}"}}
                        ]
                    }
                }
            ]
        },
        {
            "choices": [
                {
                    "delta": {
                        "tool_calls": [{"index": 1, "id": "c2", "function": {"name": "calculate"}}]
                    }
                }
            ]
        },
        {
            "choices": [
                {
                    "delta": {
                        "tool_calls": [
                            {"index": 1, "function": {"name": "calculate", "arguments": "{}"}}
                        ]
                    }
                }
            ]
        },
    ]:
        assembler.feed(chunk)
    assert [(c.id, c.name) for c in assembler.turn().tool_calls] == [
        ("c1", "get_weather"),
        ("c2", "calculate"),
    ]


async def test_the_lean_client_accepts_a_server_that_ignores_stream(served: Any) -> None:
    fake: FakeModel = served[0]
    client = HTTPModelClient(
        base_url=f"{served[1].url}/v1", api_key="k", timeout_s=5, max_retries=0
    )
    try:
        fake.reset(script.text("all at once"))
        deltas, turn = await _collect(client)
        assert deltas == ["all at once"] and turn.content == "all at once"
        fake.reset(script.tool_calls(("roll_dice", {"d": 6})))
        _, turn = await _collect(client)
        assert [(c.name, c.arguments) for c in turn.tool_calls] == [("roll_dice", '{"d":6}')]
    finally:
        await client.close()
