"""Chat limits at the limit and limit+1: rate, concurrent chats per tenant (whole and streamed,
including a client that leaves), and the per-chat token budget."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from app.limits.local import ConcurrencyLimiter
from app.main import create_app
from tests.support import fake_model as script
from tests.support import functions
from tests.support.apps import ADMIN, create_tenant, make_settings
from tests.support.chat_clients import ChatClient
from tests.support.fake_model import FakeModel
from tests.support.servers import ThreadedServer
from tests.support.waiting import within


@pytest.mark.settings(rate_limit_chat_per_minute=2)
async def test_chat_rate_limit(chat: ChatClient, fake: FakeModel) -> None:
    fake.reset(repeat=script.text("hi"))
    assert [(await chat.chat()).status_code for _ in range(2)] == [200, 200]
    limited = await chat.chat()
    assert limited.status_code == 429
    assert 1 <= int(limited.headers["Retry-After"]) <= 30
    globex = await create_tenant(chat.http, "globex")
    other = await chat.http.post(
        "/chat", json={"messages": [{"role": "user", "content": "x"}]}, headers=globex.headers
    )
    assert other.status_code == 200


def slots(chat: ChatClient) -> ConcurrencyLimiter:
    limiter: ConcurrencyLimiter = chat.app.state.services.limits.concurrent_chats
    return limiter


async def wait_for_slots(chat: ChatClient, count: int) -> None:
    await within(lambda: slots(chat).active("acme") == count, 5)


@pytest.mark.settings(max_concurrent_chats_per_tenant=2)
async def test_concurrent_chats_per_tenant(chat: ChatClient, fake: FakeModel) -> None:
    # Both chats wait in a 30 s tool until the test cancels them: no timing involved.
    fake.reset(repeat=script.tool_calls(("sleep_async", {"seconds": 30})))

    async def first_turns() -> list[httpx.Response]:
        return list(
            await asyncio.gather(chat.chat(tool_ids=["sleeper"]), chat.chat(tool_ids=["sleeper"]))
        )

    running = asyncio.create_task(first_turns())
    await wait_for_slots(chat, 2)
    refused = await chat.chat()
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "1"
    assert "MAX_CONCURRENT_CHATS_PER_TENANT" in refused.json()["detail"]
    globex = await create_tenant(chat.http, "globex")
    fake_other = await chat.http.post(
        "/chat",
        json={"messages": [{"role": "user", "content": "x"}], "tool_ids": []},
        headers=globex.headers,
    )
    assert fake_other.status_code != 429  # the cap is per tenant
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    await wait_for_slots(chat, 0)


async def test_a_stream_holds_its_slot_until_it_ends_even_if_the_client_leaves(
    fake_model_server: tuple[FakeModel, ThreadedServer], fake: FakeModel
) -> None:
    # A real server: the in-process transport would buffer the stream whole.
    settings = make_settings(
        None,
        openai_base_url=f"{fake_model_server[1].url}/v1",
        openai_api_key="sk-test",
        max_concurrent_chats_per_tenant=1,
    )
    app = create_app(settings, registry=functions.registry)
    server = ThreadedServer(app, lifespan="on").start()
    try:
        limiter: ConcurrencyLimiter = app.state.services.limits.concurrent_chats
        body = {"messages": [{"role": "user", "content": "x"}], "tool_ids": ["sleeper"]}
        fake.reset(script.tool_calls(("sleep_async", {"seconds": 30})), repeat=script.text("ok"))
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            key = await client.post("/tenants", json={"tenant_id": "acme"}, headers=ADMIN)
            client.headers["Authorization"] = f"Bearer {key.json()['api_key']}"
            async with client.stream("POST", "/chat", json={**body, "stream": True}) as stream:
                async for line in stream.aiter_lines():
                    if line.startswith("event: tool_call"):
                        break  # the tool is running and the slot is held
                assert limiter.active("acme") == 1
                assert (await client.post("/chat", json=body)).status_code == 429
            # The client left mid-tool: the run is cancelled and the slot is free again.
            await within(lambda: limiter.active("acme") == 0, 5)
            assert functions.CANCELLED == ["sleep_async"]
            assert (await client.post("/chat", json=body)).status_code == 200
            # A stream that ends normally frees its slot too.
            async with client.stream("POST", "/chat", json={**body, "stream": True}) as stream:
                assert "event: done" in (await stream.aread()).decode()
            await within(lambda: limiter.active("acme") == 0, 5)
    finally:
        server.stop()


@pytest.mark.settings(max_concurrent_chats_per_tenant=1)
async def test_a_refused_chat_never_takes_a_slot(chat: ChatClient, fake: FakeModel) -> None:
    bad = await chat.chat(tool_ids=["no-such-tool"])
    assert bad.status_code == 422
    fake.reset(repeat=script.text("hi"))
    assert (await chat.chat()).status_code == 200
    assert slots(chat).active("acme") == 0


# The fake model reports 15 tokens per call: after two calls the chat has used 30.
@pytest.mark.settings(chat_token_budget=30)
async def test_token_budget_at_the_limit_lets_the_chat_go_on(
    chat: ChatClient, fake: FakeModel
) -> None:
    fake.reset(
        script.tool_calls(("add", {"a": 1, "b": 2})),
        script.tool_calls(("add", {"a": 3, "b": 4})),
        script.text("done"),
    )
    response = await chat.chat(tool_ids=["adder"])
    assert response.json()["stop_reason"] == "completed"
    assert len(response.json()["tool_calls"]) == 2
    assert response.json()["usage"]["total_tokens"] == 45


@pytest.mark.settings(chat_token_budget=29)
async def test_token_budget_passed_stops_before_running_more_tools(
    chat: ChatClient, fake: FakeModel
) -> None:
    fake.reset(
        script.tool_calls(("add", {"a": 1, "b": 2})),
        script.tool_calls(("add", {"a": 3, "b": 4})),
        script.text("never asked"),
    )
    response = await chat.chat(tool_ids=["adder"])
    assert response.status_code == 200
    assert response.json()["stop_reason"] == "token_budget"
    assert len(response.json()["tool_calls"]) == 1  # the second turn's call was not run
    assert response.json()["usage"]["total_tokens"] == 30
    assert len(fake.requests) == 2
