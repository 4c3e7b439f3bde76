"""Faults one tenant's chat runs into leave the service answering: an endpoint that resets the
connection, a hanging tool endpoint, a hanging or garbage-sending model. The faulty chat gets
its documented answer; another tenant is served meanwhile."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from tests.support import fake_model as script
from tests.support.apps import TenantCredentials, create_tenant
from tests.support.chat_clients import ChatClient
from tests.support.documents import external
from tests.support.fake_model import FakeModel
from tests.support.servers import ThreadedServer
from tests.support.waiting import within


@pytest.fixture
def resetting_port() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that reads the request, then resets the connection (RST)."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            connection.recv(65536)
            # SO_LINGER with a zero timeout: close() sends RST instead of FIN.
            connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join()
    listener.close()


async def other_tenant_is_served(chat: ChatClient, other: TenantCredentials) -> None:
    tools = await chat.http.get("/tools/", headers=other.headers)
    assert tools.status_code == 200
    secret = await chat.http.put("/secrets/k", json={"value": "v"}, headers=other.headers)
    assert secret.status_code in (200, 201)


async def test_a_connection_reset_is_an_error_result(
    chat: ChatClient, fake: FakeModel, resetting_port: int
) -> None:
    await chat.add_tool(external("resetting", f"http://127.0.0.1:{resetting_port}/", properties={}))
    fake.reset(script.tool_calls(("resetting", {})), script.text("it failed"))
    response = await chat.chat()
    assert response.status_code == 200
    [call] = response.json()["tool_calls"]
    assert call["status"] == "error"
    assert call["error"].startswith("Error: cannot reach the tool's endpoint:")
    await other_tenant_is_served(chat, await create_tenant(chat.http, "globex"))


@pytest.mark.slow
@pytest.mark.settings(tool_timeout_s=3)
async def test_a_hanging_tool_endpoint_holds_only_its_own_chat(
    chat: ChatClient, fake: FakeModel, upstream: ThreadedServer
) -> None:
    await chat.add_tool(external("slow", f"{upstream.url}/slow", properties={}))
    globex = await create_tenant(chat.http, "globex")
    # acme's chat waits on the slow endpoint; globex's chat and writes go through meanwhile.
    fake.reset(script.tool_calls(("slow", {})), repeat=script.text("done"))
    hanging = asyncio.create_task(chat.chat(tool_ids=["slow"]))
    await within(lambda: len(fake.requests) >= 1, 5)  # the fake runs in another thread
    other = await chat.http.post(
        "/chat", json={"messages": [{"role": "user", "content": "x"}]}, headers=globex.headers
    )
    assert other.status_code == 200
    await other_tenant_is_served(chat, globex)
    assert not hanging.done()
    response = await hanging
    assert response.status_code == 200
    assert "did not" in response.json()["tool_calls"][0]["error"]


@pytest.mark.settings(model_timeout_s=1.5, model_max_retries=0)
async def test_a_hanging_model_is_504_while_other_routes_answer(
    chat: ChatClient, fake: FakeModel
) -> None:
    globex = await create_tenant(chat.http, "globex")
    fake.reset(script.hang(5))
    hanging = asyncio.create_task(chat.chat())
    await within(lambda: bool(fake.requests), 5)  # the fake runs in another thread
    await other_tenant_is_served(chat, globex)
    assert not hanging.done()
    response = await hanging
    assert response.status_code == 504
    assert response.headers["content-type"] == "application/problem+json"


@pytest.mark.settings(model_max_retries=0)
async def test_garbage_from_the_model_is_502_and_the_next_chat_works(
    chat: ChatClient, fake: FakeModel
) -> None:
    fake.reset(script.raw(b"\x00\xff not json"), repeat=script.text("fine again"))
    garbage = await chat.chat()
    assert garbage.status_code == 502
    assert garbage.headers["content-type"] == "application/problem+json"
    recovered = await chat.chat()
    assert recovered.status_code == 200
    assert recovered.json()["message"]["content"] == "fine again"


async def test_a_client_that_hangs_up_mid_chat_leaves_no_slot_or_task(
    chat: ChatClient, fake: FakeModel
) -> None:
    fake.reset(script.tool_calls(("sleep_async", {"seconds": 30})), repeat=script.text("ok"))
    task = asyncio.create_task(chat.chat(tool_ids=["sleeper"]))
    await within(lambda: bool(fake.requests), 5)  # the fake runs in another thread
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    limiter = chat.app.state.services.limits.concurrent_chats
    await within(lambda: not limiter.active("acme"), 5)  # released by the cancelled request
    after = await chat.chat(tool_ids=["sleeper"])
    assert after.status_code == 200 and after.json()["message"]["content"] == "ok"
