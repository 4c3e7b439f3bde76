"""MCP tools in /chat: naming, calls over stdio / streamable HTTP / SSE, error results, context
rules, timeouts, crashes, concurrency and caching, and that nothing outlives a chat."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from starlette.types import ASGIApp, Receive, Scope, Send

from app.mcp.config import parse_operator_servers
from tests.support import fake_model as script
from tests.support import mcp_demo
from tests.support.chat_clients import McpChat
from tests.support.mcp_demo import McpDemoServer
from tests.support.processes import connections_to
from tests.support.secantus import free_port
from tests.support.servers import ThreadedServer
from tests.support.waiting import within

HTTP_SERVERS = ["demo-http", "demo-sse"]


def tool_names(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools", [])]


@pytest.mark.slow
async def test_reference_time_server_is_listed_and_called_over_stdio(mcp_chat: McpChat) -> None:
    assert mcp_chat.new_children() == []
    body = await mcp_chat.call(
        script.tool_calls(("time__get_current_time", {"timezone": "Europe/Paris"})),
        script.text("It is morning in Paris."),
        mcp_servers=["time"],
    )
    offered = mcp_chat.fake.requests[0]["tools"]
    current = next(t for t in offered if t["function"]["name"] == "time__get_current_time")
    assert current["function"]["parameters"]["required"] == ["timezone"]
    assert "time__convert_time" in tool_names(mcp_chat.fake.requests[0])
    [record] = body["tool_calls"]
    assert record["status"] == "ok", record
    result = orjson.loads(body["messages"][2]["content"])
    assert result["timezone"] == "Europe/Paris" and result["datetime"].endswith("+01:00")
    assert body["message"]["content"] == "It is morning in Paris."
    # One process for the listing and the call, kept for the tenant's next chat.
    assert mcp_chat.hub.handshakes == 1 and len(mcp_chat.hub.pool) == 1
    await mcp_chat.hub.pool.close_idle()
    assert mcp_chat.hub.open_sessions == 0
    await within(lambda: mcp_chat.new_children() == [], 5)


async def test_without_mcp_servers_no_mcp_tool_is_offered(mcp_chat: McpChat) -> None:
    await mcp_chat.call(script.text("hi"))
    assert not [n for n in tool_names(mcp_chat.fake.requests[0]) if "__" in n]
    assert mcp_chat.hub.handshakes == 0


@pytest.mark.slow
@pytest.mark.parametrize("name", [*HTTP_SERVERS, "demo"])
async def test_calls_and_error_results_on_every_transport(mcp_chat: McpChat, name: str) -> None:
    body = await mcp_chat.call(
        script.tool_calls((f"{name}__add", {"a": 2, "b": 40}), (f"{name}__fail", {"reason": "no"})),
        script.text("done"),
        mcp_servers=[name],
    )
    added, failed = body["tool_calls"]
    assert added["status"] == "ok" and body["messages"][2]["content"] == "42"
    # isError from the server: an error result the model reads, and the chat goes on
    assert failed["status"] == "error"
    assert body["messages"][3]["content"].startswith("Error: ")
    assert body["message"]["content"] == "done"
    # Only the stdio server's session is pooled (the HTTP ones map a context value to a header).
    assert mcp_chat.hub.open_sessions == len(mcp_chat.hub.pool) == (name == "demo")


@pytest.mark.parametrize("name", HTTP_SERVERS)
async def test_context_values_reach_arguments_and_headers_but_never_the_model(
    mcp_chat: McpChat, name: str
) -> None:
    body = await mcp_chat.call(
        script.tool_calls((f"{name}__whoami", {"user_id": "evil-override"})),
        script.text("ok"),
        mcp_servers=[name],
        context_arguments={"user_id": "u-canary-1234", "x_user": "hdr-canary-5678"},
    )
    assert mcp_demo.RECEIVED == [{"user_id": "u-canary-1234", "x-user": "hdr-canary-5678"}]
    assert body["tool_calls"][0]["arguments"] == {}  # the model's override was dropped
    assert body["messages"][2]["content"] == "user=[redacted] header=[redacted]"
    whoami = next(
        t for t in mcp_chat.fake.requests[0]["tools"] if t["function"]["name"] == f"{name}__whoami"
    )
    assert "user_id" not in whoami["function"]["parameters"]["properties"]
    for raw in mcp_chat.fake.raw_requests:
        assert b"canary" not in raw


async def test_a_missing_required_context_argument_is_an_error_result(mcp_chat: McpChat) -> None:
    body = await mcp_chat.call(
        script.tool_calls(("demo-http__whoami", {})), script.text("ok"), mcp_servers=["demo-http"]
    )
    assert body["tool_calls"][0]["status"] == "error"
    assert "missing context argument 'user_id'" in body["messages"][2]["content"]
    assert mcp_demo.RECEIVED == []  # the server was never asked


@pytest.mark.slow
@pytest.mark.settings(tool_timeout_s=1.0)
@pytest.mark.parametrize("name", [*HTTP_SERVERS, "demo"])
async def test_a_hanging_tool_times_out_and_its_session_is_closed(
    mcp_chat: McpChat, name: str
) -> None:
    body = await mcp_chat.call(
        script.tool_calls((f"{name}__sleep", {"seconds": 30})),
        script.text("gave up"),
        mcp_servers=[name],
    )
    assert body["tool_calls"][0]["status"] == "error"
    assert "did not finish within 1 s" in body["messages"][2]["content"]
    # A session whose call was given up on is closed, pooled or not (the server may be stuck).
    await within(lambda: mcp_chat.hub.open_sessions == 0 and not mcp_chat.new_children(), 5)
    assert len(mcp_chat.hub.pool) == 0


@pytest.mark.settings(tool_output_max_chars=1000)
async def test_mcp_output_is_capped_like_any_tool(mcp_chat: McpChat) -> None:
    body = await mcp_chat.call(
        script.tool_calls(("demo-http__big", {"size": 50_000})),
        script.text("ok"),
        mcp_servers=["demo-http"],
    )
    content = body["messages"][2]["content"]
    assert content.startswith("x" * 1000) and "[truncated: 49000 more characters]" in content


@pytest.mark.slow
async def test_a_stdio_server_that_dies_mid_chat(mcp_chat: McpChat) -> None:
    """The crash is an error result; the next call starts a fresh process; nothing is left."""
    body = await mcp_chat.call(
        script.tool_calls(("demo__crash", {})),
        script.tool_calls(("demo__add", {"a": 1, "b": 1})),
        script.text("recovered"),
        mcp_servers=["demo"],
    )
    crashed, added = body["tool_calls"]
    assert crashed["status"] == "error", crashed
    assert "MCP server 'demo' failed the call" in crashed["error"]
    assert added["status"] == "ok", added["error"]
    assert body["messages"][4]["content"] == "2"
    # The pooled session listed and took the crash; its replacement ran `add`, and is pooled.
    assert mcp_chat.hub.handshakes == 2 and len(mcp_chat.hub.pool) == 1
    await mcp_chat.hub.pool.close_idle()
    await within(lambda: mcp_chat.new_children() == [] and mcp_chat.hub.open_sessions == 0, 5)


async def test_an_http_server_that_goes_away_mid_chat(mcp_chat: McpChat) -> None:
    doomed = McpDemoServer("streamable-http").start()
    headers = mcp_chat.tenant.headers
    entry = {"name": "doomed", "type": "streamable-http", "url": doomed.url}
    assert (
        await mcp_chat.http.post("/mcp-servers", json=entry, headers=headers)
    ).status_code == 201

    def stop_server(request: dict[str, Any]) -> script.Reply:
        doomed.stop(force=True)  # after the first call, before the second
        return script.tool_calls(("doomed__add", {"a": 1, "b": 2}))(request)

    body = await mcp_chat.call(
        script.tool_calls(("doomed__add", {"a": 1, "b": 1})),
        stop_server,
        script.text("done"),
        mcp_servers=["doomed"],
    )
    first, second = body["tool_calls"]
    assert first["status"] == "ok" and second["status"] == "error"
    assert "doomed" in second["error"]
    assert mcp_chat.hub.open_sessions == 0 and connections_to(doomed.port) == 0


@pytest.mark.parametrize("name", HTTP_SERVERS)
async def test_http_connections_are_closed_when_the_chat_ends(
    mcp_chat: McpChat, name: str, demo_http: McpDemoServer, demo_sse: McpDemoServer
) -> None:
    port = demo_http.port if name == "demo-http" else demo_sse.port
    await mcp_chat.call(
        script.tool_calls((f"{name}__add", {"a": 1, "b": 1})),
        script.text("ok"),
        mcp_servers=[name],
    )
    # the server side may take a moment to see the close; the bound stays under the server's
    # keep-alive (uvicorn: 5 s), which would close a connection the client kept on its own
    await within(lambda: connections_to(port) == 0, 3)
    assert mcp_chat.hub.open_sessions == 0


@pytest.mark.slow
@pytest.mark.settings(mcp_tools_cache_ttl_s=0)
async def test_model_failure_mid_chat_still_closes_sessions(mcp_chat: McpChat) -> None:
    mcp_chat.fake.reset(script.tool_calls(("demo__add", {"a": 1, "b": 1})), script.status(401))
    response = await mcp_chat.chat(mcp_servers=["demo"])
    assert response.status_code == 502
    assert mcp_chat.hub.runs == set() and len(mcp_chat.hub.pool) == 1  # given back to the pool
    await mcp_chat.hub.pool.close_idle()
    await within(lambda: mcp_chat.hub.open_sessions == 0 and not mcp_chat.new_children(), 5)


@pytest.fixture
def streaming_app(mcp_chat: McpChat) -> Iterator[ThreadedServer]:
    server = ThreadedServer(mcp_chat.app).start()
    yield server
    server.stop()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["demo", "demo-http"])
async def test_client_disconnect_mid_tool_closes_everything(
    mcp_chat: McpChat, streaming_app: ThreadedServer, name: str
) -> None:
    mcp_chat.fake.reset(script.tool_calls((f"{name}__sleep", {"seconds": 30})), script.text("x"))
    body = {"messages": [{"role": "user", "content": "hi"}], "mcp_servers": [name], "stream": True}
    async with (
        httpx.AsyncClient(base_url=streaming_app.url, timeout=10) as http,
        http.stream("POST", "/chat", json=body, headers=mcp_chat.tenant.headers) as response,
    ):
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line == "event: tool_call":
                break  # leave while the tool runs
    await within(
        lambda: mcp_chat.hub.open_sessions == 0 and not mcp_chat.new_children(), 15
    )  # the stdio shutdown: stdin closed, 2 s grace, SIGTERM, 2 s, SIGKILL


@pytest.mark.slow
async def test_tool_lists_are_cached_between_chats(mcp_chat: McpChat) -> None:
    for _ in range(3):
        await mcp_chat.call(script.text("hi"), mcp_servers=["demo", "demo-http"])
    assert mcp_chat.hub.handshakes == 2  # one listing per server, then the cache


@pytest.mark.settings(mcp_tools_cache_ttl_s=0)
async def test_without_the_cache_every_chat_lists_again(mcp_chat: McpChat) -> None:
    for _ in range(2):
        await mcp_chat.call(script.text("hi"), mcp_servers=["demo-http"])
    assert mcp_chat.hub.handshakes == 2


@pytest.mark.slow
async def test_concurrent_chats_share_one_listing(mcp_chat: McpChat) -> None:
    mcp_chat.fake.reset(repeat=script.text("hi"))
    responses = await asyncio.gather(*(mcp_chat.chat(mcp_servers=["demo"]) for _ in range(5)))
    assert [r.status_code for r in responses] == [200] * 5
    assert mcp_chat.hub.handshakes == 1


class _Rendezvous:
    """ASGI middleware: the `initialize` request of each server waits until all have arrived.

    Listing that connects to servers one after another can never complete (the first waits for
    the others, which have not been contacted): proof of concurrency without a timing."""

    def __init__(self, app: ASGIApp, barrier: threading.Barrier) -> None:
        self._app, self._barrier = app, barrier
        self.met = 0  # initialize requests that passed the barrier

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self._app(scope, receive, send)
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        if b'"initialize"' in body:
            await asyncio.to_thread(self._barrier.wait, 5)
            self.met += 1
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self._app(scope, replay, send)


@pytest.mark.slow  # 2 s or more in the inner loop
@pytest.mark.settings(mcp_connect_timeout_s=8)
async def test_servers_are_listed_concurrently(mcp_chat: McpChat) -> None:
    barrier = threading.Barrier(3)
    servers, gates = [], []
    for _ in range(3):
        gates.append(_Rendezvous(mcp_demo.build().streamable_http_app(), barrier))
        # Started and stopped on threads: waiting for them on this loop would stall the app's.
        servers.append(await asyncio.to_thread(ThreadedServer(gates[-1], lifespan="on").start))
    try:
        headers = mcp_chat.tenant.headers
        for i, srv in enumerate(servers):
            entry = {"name": f"meet{i}", "type": "streamable-http", "url": f"{srv.url}/mcp"}
            created = await mcp_chat.http.post("/mcp-servers", json=entry, headers=headers)
            assert created.status_code == 201
        body = await mcp_chat.call(script.text("hi"), mcp_servers=["meet0", "meet1", "meet2"])
        assert body["message"]["content"] == "hi"
        offered = tool_names(mcp_chat.fake.requests[0])
        assert {"meet0__add", "meet1__add", "meet2__add"} <= set(offered)
        assert not barrier.broken and [gate.met for gate in gates] == [1, 1, 1]
    finally:
        for srv in servers:
            await asyncio.to_thread(srv.stop)


async def test_unknown_or_unavailable_servers_are_422(mcp_chat: McpChat) -> None:
    mcp_chat.fake.reset(script.text("hi"))
    response = await mcp_chat.chat(mcp_servers=["time", "nope", "globex-only"])
    assert response.status_code == 422
    assert response.json()["errors"] == [
        {"path": "$.mcp_servers", "message": "unknown: nope, globex-only"}
    ]
    assert mcp_chat.fake.requests == []


async def test_a_dead_server_is_skipped_and_the_chat_goes_on_with_the_live_one(
    mcp_chat: McpChat,
) -> None:
    # Nothing listens there (port 9 would now be refused by the port policy before any connect).
    entry = {"name": "gone", "type": "sse", "url": f"http://127.0.0.1:{free_port()}/sse"}
    headers = mcp_chat.tenant.headers
    assert (
        await mcp_chat.http.post("/mcp-servers", json=entry, headers=headers)
    ).status_code == 201
    body = await mcp_chat.call(
        script.tool_calls(("demo-http__add", {"a": 2, "b": 3})),
        script.text("5"),
        mcp_servers=["gone", "demo-http"],
        tool_ids=[],
    )
    assert body["stop_reason"] == "completed" and body["tool_calls"][0]["status"] == "ok"
    [skipped] = body["skipped_mcp_servers"]
    assert skipped["name"] == "gone" and "MCP server 'gone' is unavailable" in skipped["reason"]
    offered = {t["function"]["name"] for t in mcp_chat.fake.requests[0]["tools"]}
    assert "demo-http__add" in offered and not any(n.startswith("gone__") for n in offered)

    # Streamed: the skip is the first event, and in `done`.
    mcp_chat.fake.reset(script.text("hi"))
    streamed = await mcp_chat.http.post(
        "/chat",
        json={
            "messages": [{"role": "user", "content": "hi"}],
            "mcp_servers": ["gone"],
            "stream": True,
        },
        headers=headers,
    )
    assert streamed.status_code == 200
    assert streamed.text.startswith("event: mcp_server_skipped")
    assert '"skipped_mcp_servers":[{"name":"gone"' in streamed.text.replace(" ", "")


async def test_single_mcp_tools_are_picked_by_id_in_tool_ids(mcp_chat: McpChat) -> None:
    body = await mcp_chat.call(
        script.tool_calls(("demo-http__add", {"a": 1, "b": 2})),
        script.text("3"),
        tool_ids=["demo-http__add", "rolldice"],
    )
    assert body["tool_calls"][0]["status"] == "ok"
    offered = [t["function"]["name"] for t in mcp_chat.fake.requests[0]["tools"]]
    assert sorted(offered) == ["demo-http__add", "roll_dice"]

    mcp_chat.fake.reset(script.text("hi"))
    missing = await mcp_chat.chat(tool_ids=["demo-http__nothing", "nope__add"])
    assert missing.status_code == 422
    assert missing.json()["errors"] == [{"path": "$.tool_ids", "message": "unknown: nope"}]
    missing = await mcp_chat.chat(tool_ids=["demo-http__nothing"])
    assert missing.status_code == 422
    assert missing.json()["errors"] == [
        {"path": "$.tool_ids", "message": "unavailable: demo-http__nothing"}
    ]


@pytest.mark.slow  # 2 s or more in the inner loop
async def test_include_and_exclude_choose_a_servers_tools(
    mcp_chat: McpChat, demo_http: McpDemoServer
) -> None:
    entry = {
        "name": "picked",
        "type": "streamable-http",
        "url": demo_http.url,
        "include": ["add", "whoami", "fail"],
        "exclude": ["fail"],
    }
    headers = mcp_chat.tenant.headers
    created = await mcp_chat.http.post("/mcp-servers", json=entry, headers=headers)
    assert created.status_code == 201, created.text
    assert created.json()["include"] == ["add", "fail", "whoami"]
    listed = await mcp_chat.http.get("/mcp-servers/picked/tools", headers=headers)
    assert sorted(t["tool_id"] for t in listed.json()) == ["picked__add", "picked__whoami"]
    await mcp_chat.call(script.text("hi"), mcp_servers=["picked"], tool_ids=[])
    offered = [t["function"]["name"] for t in mcp_chat.fake.requests[0]["tools"]]
    assert sorted(offered) == ["picked__add", "picked__whoami"]
    # An excluded tool cannot be called by id either.
    invoked = await mcp_chat.http.post(
        "/tools/picked__fail/invoke", json={"arguments": {"reason": "x"}}, headers=headers
    )
    assert invoked.status_code == 404


@pytest.mark.slow
async def test_a_name_offered_twice_is_422(mcp_chat: McpChat) -> None:
    tool = {
        "tool_id": "clash",
        "type": "function",
        "function": {"name": "demo__add", "description": "x", "parameters": {"type": "object"}},
    }
    created = await mcp_chat.http.post("/tools/create", json=tool, headers=mcp_chat.tenant.headers)
    if created.status_code != 201:  # the function dictionary has no such function: external
        tool.update(type="external")
        tool["function"].update(url="https://api.example.com/x", method="GET")
        created = await mcp_chat.http.post(
            "/tools/create", json=tool, headers=mcp_chat.tenant.headers
        )
    assert created.status_code == 201, created.text
    response = await mcp_chat.chat(mcp_servers=["demo"])
    assert response.status_code == 422
    assert "'demo__add' is offered twice" in response.json()["errors"][0]["message"]


async def test_secret_headers_never_reach_the_logs(
    mcp_chat: McpChat, demo_http: McpDemoServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "Bearer log-canary-3b8f1e2d"
    headers = mcp_chat.tenant.headers
    for name, url in (("ok", demo_http.url), ("bad", f"http://127.0.0.1:{free_port()}/mcp")):
        entry = {
            "name": name,
            "type": "streamable-http",
            "url": url,
            "headers": {"Authorization": secret},
        }
        assert (
            await mcp_chat.http.post("/mcp-servers", json=entry, headers=headers)
        ).status_code == 201
    await mcp_chat.call(
        script.tool_calls(("ok__add", {"a": 1, "b": 2})), script.text("x"), mcp_servers=["ok"]
    )
    assert (await mcp_chat.http.get("/mcp-servers/bad/tools", headers=headers)).status_code == 502
    assert "log-canary" not in caplog.text


def test_operator_revision_changes_with_the_document() -> None:
    one = parse_operator_servers('{"mcpServers": {"a": {"command": "x"}}}')["a"]
    two = parse_operator_servers('{"mcpServers": {"a": {"command": "y"}}}')["a"]
    assert one.revision != two.revision
