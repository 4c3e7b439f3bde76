"""Progress from long tools: generator function tools and MCP servers report steps; streamed
chats and streamed invokes show them (scrubbed), the model only ever reads the final result."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from tests.support import fake_model as script
from tests.support import progress_functions
from tests.support.apps import create_tenant, http_client, make_settings, running_app
from tests.support.chat_clients import ChatClient
from tests.support.documents import external
from tests.support.fake_model import FakeModel
from tests.support.servers import ThreadedServer

CANARY = "cnry-progress-4d1e"


@pytest.fixture
async def steps_chat(
    request: pytest.FixtureRequest,
    fake_model_server: tuple[FakeModel, ThreadedServer],
    fake: FakeModel,
) -> AsyncIterator[ChatClient]:
    """A tenant of an app whose functions report progress, with the scripted model."""
    marker = request.node.get_closest_marker("settings")
    settings = make_settings(
        None,
        openai_base_url=f"{fake_model_server[1].url}/v1",
        openai_api_key="sk-test-key",
        model_timeout_s=5.0,
        **(marker.kwargs if marker else {}),
    )
    async with (
        running_app(settings, progress_functions.registry) as app,
        http_client(app) as http,
    ):
        yield ChatClient(app, http, await create_tenant(http, "acme"))


def events_of(text: str) -> list[tuple[str, Any]]:
    return [
        (block.split("\n")[0].removeprefix("event: "), orjson.loads(block.split("data: ", 1)[1]))
        for block in text.strip().split("\n\n")
        if block.startswith("event:")
    ]


async def test_a_streamed_chat_shows_progress_and_the_model_reads_only_the_result(
    steps_chat: ChatClient, fake: FakeModel
) -> None:
    fake.reset(script.tool_calls(("countdown", {"count": 3})), script.text("done"))
    response = await steps_chat.chat(stream=True)
    events = events_of(response.text)
    names = [name for name, _ in events]
    progress = [data for name, data in events if name == "tool_progress"]
    call_id = events[names.index("tool_call")][1]["id"]
    assert progress == [
        {"id": call_id, "message": f"step {n} of 3", "fraction": n / 3} for n in (1, 2, 3)
    ]
    assert names.index("tool_call") < names.index("tool_progress") < names.index("tool_result")
    tool_message = fake.requests[1]["messages"][-1]
    assert tool_message["content"] == "counted down from 3"
    assert events[-1][1]["tool_calls"][0]["status"] == "ok"


async def test_a_whole_chat_gets_the_result_only(steps_chat: ChatClient, fake: FakeModel) -> None:
    fake.reset(script.tool_calls(("plain_steps", {"count": 2})), script.text("done"))
    response = await steps_chat.chat()
    assert response.status_code == 200, response.text
    assert response.json()["messages"][2]["content"] == '{"steps":2}'
    assert "plain 1" not in response.text


async def test_progress_text_is_scrubbed_cut_and_typed(
    steps_chat: ChatClient, fake: FakeModel
) -> None:
    fake.reset(script.tool_calls(("leaky_steps", {})), script.text("done"))
    response = await steps_chat.chat(stream=True, context_arguments={"api_token": CANARY})
    assert CANARY not in response.text
    progress = [data for name, data in events_of(response.text) if name == "tool_progress"]
    assert progress[0] == {
        "id": progress[0]["id"],
        "message": "using token [redacted]",
        "fraction": None,
    }
    assert progress[1]["message"].startswith('{"token": "[redacted]"}')
    assert len(progress[1]["message"]) == 500 and progress[1]["fraction"] == 1.0
    assert progress[2]["message"] == "None" and progress[2]["fraction"] is None


async def test_a_flood_of_reports_is_bounded(steps_chat: ChatClient, fake: FakeModel) -> None:
    fake.reset(script.tool_calls(("flood", {"count": 5000})), script.text("done"))
    response = await steps_chat.chat(stream=True)
    names = [name for name, _ in events_of(response.text)]
    assert names.count("tool_progress") == 1000
    assert fake.requests[1]["messages"][-1]["content"] == "flooded"


@pytest.mark.settings(tool_timeout_s=0.3)
async def test_a_generator_past_its_timeout_is_stopped(
    steps_chat: ChatClient, fake: FakeModel
) -> None:
    fake.reset(script.tool_calls(("stuck_steps", {})), script.text("done"))
    response = await steps_chat.chat(stream=True)
    events = events_of(response.text)
    assert [d["message"] for n, d in events if n == "tool_progress"] == ["started"]
    assert "did not finish" in fake.requests[1]["messages"][-1]["content"]


async def _invoke(
    chat: ChatClient, tool_id: str, body: dict[str, Any], **headers: str
) -> httpx.Response:
    return await chat.http.post(
        f"/tools/{tool_id}/invoke",
        json=body,
        headers={**chat.tenant.headers, "Accept": "text/event-stream", **headers},
    )


async def test_invoke_streams_progress_then_the_result(steps_chat: ChatClient) -> None:
    response = await _invoke(steps_chat, "countdown", {"arguments": {"count": 2}})
    assert response.headers["content-type"].startswith("text/event-stream")
    events = events_of(response.text)
    assert events[:2] == [
        ("tool_progress", {"message": "step 1 of 2", "fraction": 0.5}),
        ("tool_progress", {"message": "step 2 of 2", "fraction": 1.0}),
    ]
    name, done = events[-1]
    assert name == "done" and done["status"] == "ok"
    assert (
        done["content"] == "counted down from 2" and done["run_id"] == response.headers["x-run-id"]
    )
    plain = await steps_chat.http.post(
        "/tools/countdown/invoke",
        json={"arguments": {"count": 2}},
        headers=steps_chat.tenant.headers,
    )
    assert plain.json()["content"] == "counted down from 2"


async def test_a_streamed_invoke_answers_its_4xx_before_any_stream(steps_chat: ChatClient) -> None:
    missing = await _invoke(steps_chat, "nope", {"arguments": {}})
    assert (
        missing.status_code == 404 and missing.headers["content-type"] == "application/problem+json"
    )
    deep: Any = 1
    for _ in range(100):
        deep = [deep]
    nested = await _invoke(steps_chat, "countdown", {"arguments": {"count": deep}})
    assert nested.status_code == 422
    confused = await _invoke(steps_chat, "countdown", {"arguments": "count"})
    assert confused.status_code == 422
    tool = external("remote", "https://api.example.com/remote", properties={})
    await steps_chat.add_tool(tool)
    globex = await create_tenant(steps_chat.http, "globex")
    other = await steps_chat.http.post(
        "/tools/remote/invoke",
        json={"arguments": {}},
        headers={**globex.headers, "Accept": "text/event-stream"},
    )
    assert other.status_code == 404  # the first tenant's tool: not found, no stream
    failing = await _invoke(steps_chat, "countdown", {"arguments": {"count": "x"}})
    name, done = events_of(failing.text)[-1]
    assert name == "done" and done["status"] == "error"
    assert done["error"]["kind"] == "invalid_arguments"
