"""POST /chat as server-sent events, read by a real HTTP client from a real server; and a whole
(non-streamed) chat whose client leaves before its answer."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from app.main import create_app
from tests.support import fake_model as script
from tests.support import functions
from tests.support.apps import ADMIN, make_settings
from tests.support.fake_model import FakeModel
from tests.support.fixtures.chat import MODEL_CLIENTS
from tests.support.servers import ThreadedServer
from tests.support.waiting import runs_recorded, within

CANARY = "CANARY-stream-5d1f0b"


@dataclass
class Streamer:
    base: str
    headers: dict[str, str]

    async def events(self, body: dict[str, Any], **headers: str) -> list[tuple[str, Any]]:
        """Every event of one streamed chat, in order; comments as ('comment', text)."""
        found: list[tuple[str, Any]] = []
        async with (
            httpx.AsyncClient(timeout=30) as client,
            client.stream(
                "POST", f"{self.base}/chat", json=body, headers={**self.headers, **headers}
            ) as response,
        ):
            assert response.status_code == 200, await response.aread()
            assert response.headers["content-type"].startswith("text/event-stream")
            run_id = response.headers["x-run-id"]
            name = None
            async for line in response.aiter_lines():
                if line.startswith(":"):
                    found.append(("comment", line[1:].strip()))
                elif line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    found.append((str(name), orjson.loads(line[6:])))
        if found and found[-1][0] == "done":
            assert found[-1][1]["run_id"] == run_id
        return found


@pytest.fixture(params=MODEL_CLIENTS)
def streamer(
    request: pytest.FixtureRequest,
    fake_model_server: tuple[FakeModel, ThreadedServer],
    fake: FakeModel,
) -> Iterator[Streamer]:
    settings = make_settings(
        None,
        openai_base_url=f"{fake_model_server[1].url}/v1",
        openai_api_key="sk-test",
        model_client=request.param,
        chat_stream_keepalive_s=0.2,
        tool_timeout_s=10,
    )
    server = ThreadedServer(
        create_app(settings, registry=functions.registry), lifespan="on"
    ).start()
    key = httpx.post(f"{server.url}/tenants", json={"tenant_id": "acme"}, headers=ADMIN).json()
    yield Streamer(server.url, {"Authorization": f"Bearer {key['api_key']}"})
    server.stop()


def names(events: list[tuple[str, Any]]) -> list[str]:
    return [name for name, _ in events if name != "comment"]


async def test_a_streamed_answer(streamer: Streamer, fake: FakeModel) -> None:
    fake.reset(script.streamed_text("Hel", "lo"))
    events = await streamer.events(
        {"messages": [{"role": "user", "content": "hi"}], "stream": True}
    )
    assert names(events) == ["iteration", "message.delta", "message.delta", "done"]
    assert events[0] == ("iteration", {"n": 1})
    assert [data["content"] for name, data in events if name == "message.delta"] == ["Hel", "lo"]
    done = events[-1][1]
    assert done["message"] == {"role": "assistant", "content": "Hello"}
    assert done["stop_reason"] == "completed" and done["usage"]["total_tokens"] == 10


async def test_tool_calls_in_fragments_then_an_answer(streamer: Streamer, fake: FakeModel) -> None:
    arguments = orjson.dumps({"field": "email", "api_token": "model-guess"}).decode()
    fake.reset(
        script.streamed_tool_calls(("call_1", "get_profile", arguments), piece=4),
        script.streamed_text("Your email is on file."),
    )
    events = await streamer.events(
        {
            "messages": [{"role": "user", "content": "email?"}],
            "context_arguments": {"user_id": "u-42", "api_token": CANARY},
        },
        accept="text/event-stream",  # the header alone asks for a stream
    )
    assert names(events) == [
        "iteration",
        "tool_call",
        "tool_result",
        "iteration",
        "message.delta",
        "done",
    ]
    call = dict(events)["tool_call"]
    assert call == {"id": "call_1", "name": "get_profile", "arguments": {"field": "email"}}
    result = dict(events)["tool_result"]
    assert result["id"] == "call_1" and result["status"] == "ok" and "Ada" in result["preview"]
    assert functions.RECEIVED == [{"user_id": "u-42", "api_token": CANARY, "field": "email"}]
    assert CANARY not in orjson.dumps(events).decode()
    done = events[-1][1]
    non_streamed_keys = {
        "run_id",
        "message",
        "messages",
        "stop_reason",
        "iterations",
        "tool_calls",
        "usage",
        "finish_reason",
        "skipped_mcp_servers",
        "pending_approvals",
    }
    assert set(done) == non_streamed_keys and done["iterations"] == 2


async def test_keep_alive_comments_while_a_tool_runs(streamer: Streamer, fake: FakeModel) -> None:
    slow = orjson.dumps({"seconds": 0.7}).decode()
    fake.reset(
        script.streamed_tool_calls(("call_1", "sleep_async", slow)), script.streamed_text("ok")
    )
    events = await streamer.events({"messages": [{"role": "user", "content": "x"}], "stream": True})
    assert ("comment", "keep-alive") in events
    assert names(events)[-1] == "done"


async def test_model_failure_is_an_error_event(streamer: Streamer, fake: FakeModel) -> None:
    fake.reset(repeat=script.status(500))
    events = await streamer.events({"messages": [{"role": "user", "content": "x"}], "stream": True})
    assert names(events) == ["iteration", "error"]
    error = events[-1][1]
    assert error["status"] == 502 and "HTTP 500" in error["detail"]
    assert set(error) >= {"type", "title", "status", "detail"}


async def test_bad_requests_fail_before_streaming(streamer: Streamer) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"{streamer.base}/chat",
            headers=streamer.headers,
            json={
                "messages": [{"role": "user", "content": "x"}],
                "stream": True,
                "tool_ids": ["ghost"],
            },
        )
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"


async def test_disconnect_cancels_the_running_tool(streamer: Streamer, fake: FakeModel) -> None:
    slow = orjson.dumps({"seconds": 5}).decode()
    fake.reset(
        script.streamed_tool_calls(("call_1", "sleep_async", slow)), script.streamed_text("late")
    )
    async with (
        httpx.AsyncClient(timeout=30) as client,
        client.stream(
            "POST",
            f"{streamer.base}/chat",
            headers=streamer.headers,
            json={"messages": [{"role": "user", "content": "x"}], "stream": True},
        ) as response,
    ):
        async for line in response.aiter_lines():
            if line.startswith("event: tool_call"):
                break  # the client goes away while the tool runs
    await within(lambda: bool(functions.CANCELLED), 5)
    assert functions.CANCELLED == ["sleep_async"]
    assert functions.TIMELINE == []  # the tool never finished
    assert len(fake.requests) == 1  # and the model was not called again
    async with httpx.AsyncClient(base_url=streamer.base) as client:
        runs = await runs_recorded(client, streamer.headers, 1, "/runs?status=cancelled")
    assert [run["stop_reason"] for run in runs] == ["cancelled"]


def _cancelled_chats(metrics: str) -> float:
    for line in metrics.splitlines():
        if line.startswith('toolgate_chats_total{stop_reason="cancelled"}'):
            return float(line.split()[-1])
    return 0.0


async def _leave_whole_chat(
    streamer: Streamer, body: dict[str, Any], when: Callable[[], bool]
) -> None:
    """Send a non-streamed chat on a socket of our own, and close it once `when` holds."""
    port = urlsplit(streamer.base).port
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    payload = orjson.dumps(body)
    head = "".join(
        f"{name}: {value}\r\n"
        for name, value in {
            "Host": f"127.0.0.1:{port}",
            "Content-Type": "application/json",
            "Content-Length": str(len(payload)),
            **streamer.headers,
        }.items()
    )
    writer.write(f"POST /chat HTTP/1.1\r\n{head}\r\n".encode() + payload)
    await writer.drain()
    try:
        await within(when, 10)
        assert not reader.at_eof()  # no answer came: the client leaves before it
    finally:
        writer.close()
        await writer.wait_closed()


async def _recorded_cancelled(streamer: Streamer) -> None:
    async with httpx.AsyncClient(base_url=streamer.base) as client:
        runs = await runs_recorded(client, streamer.headers, 1, "/runs?status=cancelled")

        async def counted() -> bool:
            return _cancelled_chats((await client.get("/metrics")).text) == 1

        await within(counted, 5)
        metrics = (await client.get("/metrics")).text
    assert [run["stop_reason"] for run in runs] == ["cancelled"]
    # Counted as the client's leaving (nginx's 499), never as a server error.
    left = 'toolgate_http_requests_total{method="POST",route="/chat",status="499"} 1.0'
    assert left in metrics and 'route="/chat",status="500"' not in metrics


async def test_a_whole_chat_stops_its_tool_when_the_client_leaves(
    streamer: Streamer, fake: FakeModel
) -> None:
    """Issue 43: a non-streamed chat ran on after its client left (8 model calls, 7 tools)."""
    slow = orjson.dumps({"seconds": 5}).decode()
    fake.reset(repeat=script.tool_calls(("sleep_async", slow)))
    body = {"messages": [{"role": "user", "content": "x"}], "tool_ids": ["sleeper"]}
    await _leave_whole_chat(streamer, body, lambda: functions.STARTED == ["sleep_async"])
    await within(lambda: bool(functions.CANCELLED), 5)
    assert functions.CANCELLED == ["sleep_async"]
    assert functions.TIMELINE == []  # the tool never finished
    await _recorded_cancelled(streamer)
    assert len(fake.requests) == 1  # and the model was not called again


async def test_a_whole_chat_stops_its_model_call_when_the_client_leaves(
    streamer: Streamer, fake: FakeModel
) -> None:
    """The client leaves while the model thinks: the call is dropped, the run is `cancelled`
    at once (the model's answer is never waited for)."""
    held = threading.Event()
    answer = script.text("late")

    def slow_model(request: dict[str, Any]) -> script.Reply:
        reply = answer(request)
        reply.released = held
        return reply

    fake.reset(slow_model, repeat=answer)
    body = {"messages": [{"role": "user", "content": "x"}], "tool_ids": []}
    try:
        await _leave_whole_chat(streamer, body, lambda: len(fake.requests) == 1)
        await _recorded_cancelled(streamer)
    finally:
        held.set()
    assert len(fake.requests) == 1
