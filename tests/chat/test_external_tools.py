"""External tools against a real HTTP server on 127.0.0.1 (allowed by OUTBOUND_ALLOW)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from app.repositories.tools import ToolRepository
from tests.support import fake_model as script
from tests.support.chat_clients import ChatClient
from tests.support.documents import external
from tests.support.fake_model import FakeModel
from tests.support.servers import ThreadedServer
from tests.support.upstream import RECEIVED


async def _call(chat: ChatClient, fake: FakeModel, name: str, args: Any, **body: Any) -> Any:
    fake.reset(script.tool_calls((name, args)), script.text("ok"))
    response = await chat.chat(**body)
    assert response.status_code == 200, response.text
    return response.json()["tool_calls"][0], response.json()["messages"][2]["content"]


@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_query_methods_send_arguments_as_query_parameters(
    chat: ChatClient, fake: FakeModel, upstream: ThreadedServer, method: str
) -> None:
    tool = external(
        "echo", f"{upstream.url}/echo", method, context_parameters=[{"name": "user_id"}]
    )
    await chat.add_tool({**tool, "approval": "never"})  # DELETE would wait for a person
    record, content = await _call(
        chat, fake, "echo", {"city": "Paris", "days": [1, 2]}, context_arguments={"user_id": "u-42"}
    )
    assert record["status"] == "ok"
    echoed = orjson.loads(content)
    assert echoed["method"] == method
    # The endpoint echoed the context value; it was scrubbed before the model saw it.
    sent = [("city", "Paris"), ("days", "1"), ("days", "2")]
    assert echoed["query"] == [list(pair) for pair in sent] + [["user_id", "[redacted]"]]
    assert echoed["json"] is None
    assert RECEIVED[-1]["query"] == [*sent, ("user_id", "u-42")]


@pytest.mark.parametrize("method", ["POST", "PUT"])
async def test_body_methods_send_a_json_body(
    chat: ChatClient, fake: FakeModel, upstream: ThreadedServer, method: str
) -> None:
    await chat.add_tool(external("echo", f"{upstream.url}/echo", method))
    _record, content = await _call(chat, fake, "echo", {"city": "Paris", "days": [3]})
    echoed = orjson.loads(content)
    assert echoed["json"] == {"city": "Paris", "days": [3]} and echoed["query"] == []
    assert echoed["content_type"] == "application/json"


@pytest.mark.parametrize("code", [404, 500])
async def test_upstream_errors_carry_status_and_a_short_body(
    chat: ChatClient, fake: FakeModel, upstream: ThreadedServer, code: int
) -> None:
    await chat.add_tool(external("failing", f"{upstream.url}/status/{code}"))
    record, content = await _call(chat, fake, "failing", {})
    assert record["status"] == "error"
    assert content.startswith(f"Error: the tool's endpoint answered HTTP {code}: upstream says no")
    assert len(content) < 500


@pytest.mark.settings(tool_timeout_s=0.5)
async def test_slow_upstream_times_out(
    chat: ChatClient, fake: FakeModel, upstream: ThreadedServer
) -> None:
    await chat.add_tool(external("slow", f"{upstream.url}/slow", properties={}))
    record, _ = await _call(chat, fake, "slow", {})
    assert record["status"] == "error" and "did not" in record["error"]


@pytest.mark.settings(tool_response_max_bytes=10_000, tool_output_max_chars=50_000)
async def test_large_response_is_read_up_to_the_cap(
    chat: ChatClient, fake: FakeModel, upstream: ThreadedServer
) -> None:
    await chat.add_tool(external("big", f"{upstream.url}/big", properties={}))
    record, content = await _call(chat, fake, "big", {})
    assert record["status"] == "ok"
    assert content.startswith("x" * 10_000)
    assert content.endswith("[truncated: the response exceeded 10000 bytes]")


@pytest.mark.slow
async def test_gzip_bomb_stops_at_the_decoded_cap(
    chat: ChatClient, fake: FakeModel, upstream: ThreadedServer
) -> None:
    await chat.add_tool(external("bomb", f"{upstream.url}/bomb", properties={}))
    _record, content = await _call(chat, fake, "bomb", {})
    # Reading stopped at the 1 MiB decoded cap (not 50 MB); the model sees 16,000 characters.
    shown, rest = content.split("\n[truncated: ")
    more = int(rest.split(" ")[0])
    marker = len("\n[truncated: the response exceeded 1048576 bytes]")
    assert len(shown) == 16_000 and len(shown) + more == 1_048_576 + marker


async def test_redirects_are_not_followed(
    chat: ChatClient, fake: FakeModel, upstream: ThreadedServer
) -> None:
    await chat.add_tool(external("moved", f"{upstream.url}/redirect", properties={}))
    record, _ = await _call(chat, fake, "moved", {})
    assert record["status"] == "error" and "HTTP 302" in record["error"]


async def test_unreachable_endpoint(chat: ChatClient, fake: FakeModel) -> None:
    from tests.support.secantus import free_port

    await chat.add_tool(external("gone", f"http://127.0.0.1:{free_port()}/", properties={}))
    record, _ = await _call(chat, fake, "gone", {})
    assert record["status"] == "error" and "cannot reach" in record["error"]


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/x",
        "http://0x7f.1/",
        "http://[::1]/",
        "http://169.254.169.254/",
        "http://0177.0.0.1/",
        "http://localhost/",
        "file:///etc/passwd",
        "http://api.example.com:6379/",
        "http://1.1.1.1.1/",
    ],
)
@pytest.mark.settings(outbound_allow=[])
async def test_unsafe_urls_are_422_at_create(chat: ChatClient, url: str) -> None:
    response = await chat.http.post(
        "/tools/create", headers=chat.tenant.headers, json=external("ssrf", url)
    )
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["path"] == "$.function.url"


@pytest.mark.settings(outbound_allow=[])
async def test_connect_time_guard_blocks_a_stored_tool(
    chat: ChatClient, fake: FakeModel, upstream: ThreadedServer
) -> None:
    # As if the tool was created while the operator allowed 127.0.0.1, and the allowance is gone.
    tools = ToolRepository(chat.app.state.services.database)
    doc = external("internal", f"{upstream.url}/echo")
    doc.update(context_parameters=[], tags=[], enabled=True)
    await tools.insert(doc, tenant_id=chat.tenant.tenant_id)
    before = len(RECEIVED)
    record, content = await _call(chat, fake, "internal", {"city": "x"})
    assert record["status"] == "error" and content.startswith("Error: blocked:")
    assert len(RECEIVED) == before  # nothing reached the internal server
