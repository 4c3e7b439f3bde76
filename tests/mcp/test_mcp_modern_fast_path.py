"""`/mcp` answers 2026-07-28 clients' `server/discover`, `tools/list` and `tools/call` itself
(app/api/mcp_modern.py): each answer must be the one the SDK's own transport gives, which is
what the fast path falls back to for anything it declines."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel import Server
from mcp.types import CallToolResult, TextContent

from app.api.mcp_modern import ModernAnswers, _shape
from tests.mcp.test_mcp_gateway import Served, served  # noqa: F401 - a fixture: a real port
from tests.support.apps import TenantCredentials, create_tenant

MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
}


def _request(method: str, params: dict[str, Any], **headers: str) -> tuple[Any, dict[str, str]]:
    sent = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
        **headers,
    }
    if "name" in params and "Mcp-Name" not in headers:
        sent["Mcp-Name"] = str(params["name"])
    body = {"jsonrpc": "2.0", "id": 11, "method": method, "params": {**params, "_meta": META}}
    return body, sent


def _deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


CASES: list[tuple[str, dict[str, Any], dict[str, str]]] = [
    ("server/discover", {}, {}),
    ("tools/list", {}, {}),
    ("tools/call", {"name": "add", "arguments": {"a": 40, "b": 2}}, {}),
    ("tools/call", {"name": "explode", "arguments": {"reason": "no"}}, {}),
    ("tools/call", {"name": "nope", "arguments": {}}, {}),
    ("tools/call", {"name": "add", "arguments": {"a": "x", "b": 2}}, {}),
    ("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, {"Mcp-Name": "other"}),
    ("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, {"Mcp-Param-A": "1"}),
    ("tools/call", {"arguments": {}}, {}),
    ("tools/list", {}, {"Accept": "text/event-stream"}),
    ("ping", {}, {}),
    # type-confused and deep: the same answer either way, never a 500
    ("tools/call", {"name": 7, "arguments": {}}, {"Mcp-Name": "7"}),
    ("tools/call", {"name": "add", "arguments": [1, 2]}, {}),
    ("tools/call", {"name": "add", "arguments": {"a": _deep(60), "b": 1}}, {}),
    ("tools/list", {"cursor": {"x": 1}}, {}),
]


@pytest.fixture
async def acme(served: Served) -> AsyncIterator[TenantCredentials]:  # noqa: F811
    yield await create_tenant(served.http, "acme")


async def test_every_answer_is_the_sdks_own(
    served: Served,  # noqa: F811
    acme: TenantCredentials,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def send_all() -> list[tuple[int, Any]]:
        answers = []
        for method, params, headers in CASES:
            body, sent = _request(method, params, **headers)
            response = await served.http.post("/mcp", json=body, headers={**acme.headers, **sent})
            content = response.json() if response.content else None
            answers.append((response.status_code, content))
        return answers

    answered: list[bool] = []
    original = ModernAnswers.answer

    async def watched(self: ModernAnswers, scope: Any, message: Any, send: Any) -> bool:
        answered.append(await original(self, scope, message, send))
        return answered[-1]

    monkeypatch.setattr(ModernAnswers, "answer", watched)
    fast = await send_all()
    # answered here: discover, list, the calls the SDK would run; the rest went to the SDK
    assert answered[:11] == [True] * 6 + [False, True, False, False, False]
    assert all(status < 500 for status, _ in fast)
    declined: list[str] = []

    async def decline(self: ModernAnswers, scope: Any, message: Any, send: Any) -> bool:
        declined.append(message.get("method"))
        return False  # what the fast path does with anything it does not answer

    monkeypatch.setattr(ModernAnswers, "answer", decline)
    sdk = await send_all()
    assert len(declined) == len(CASES)
    for case, ours, theirs in zip(CASES, fast, sdk, strict=True):
        assert ours == theirs, case
    assert fast[2][1]["result"]["content"][0]["text"] == "42"


async def test_the_sdks_client_in_the_2026_era_lists_and_calls(
    served: Served,  # noqa: F811
    acme: TenantCredentials,
) -> None:
    """`mcp.Client` 2.x speaks 2026-07-28 by default (it probes `server/discover`). It runs on a
    loop of its own: its first-use work (building its models) would otherwise stall the app's."""

    async def use() -> tuple[set[str], Any]:
        http = httpx.AsyncClient(headers=acme.headers, timeout=30)
        transport = streamable_http_client(f"{served.url}/mcp", http_client=http)
        async with http, Client(transport) as client:
            listed = await client.list_tools()
            added = await client.call_tool("add", {"a": 2, "b": 3})
        return {tool.name for tool in listed.tools}, added

    names, added = await asyncio.to_thread(asyncio.run, use())
    assert "add" in names
    assert not added.is_error and json.dumps(added.model_dump()).count('"5"') == 1


async def test_an_mcp_param_header_that_disagrees_with_its_argument_goes_to_the_sdk() -> None:
    """Only an upstream MCP server's tool can carry `x-mcp-header` (stored schemas refuse it):
    the header check runs against that one tool's schema, and a refusal is the SDK's to send."""
    schema = {
        "type": "object",
        "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
    }
    calls: list[str] = []

    async def call_tool(ctx: Any, params: Any, *, progress: Any = None) -> CallToolResult:
        calls.append(params.name)
        return CallToolResult(content=[TextContent(type="text", text="ok")])

    async def list_tools(ctx: Any, params: Any) -> Any:
        raise AssertionError("not listed for a call")

    async def input_schema(request: Any, name: str) -> dict[str, Any] | None:
        return schema if name == "regional" else None

    answers = ModernAnswers(
        Server("t"), list_tools=list_tools, call_tool=call_tool, input_schema=input_schema
    )

    async def answer(**headers: str) -> tuple[bool, list[Any]]:
        body, sent = _request("tools/call", {"name": "regional", "arguments": {"region": "eu"}})
        raw = [(k.lower().encode(), v.encode()) for k, v in {**sent, **headers}.items()]
        scope = {"type": "http", "method": "POST", "headers": raw, "path": "/mcp"}
        sent_messages: list[Any] = []

        async def send(message: Any) -> None:
            sent_messages.append(message)

        return await answers.answer(scope, body, send), sent_messages

    assert await answer() == (False, [])  # the header is missing
    assert await answer(**{"Mcp-Param-Region": "us"}) == (False, [])  # it disagrees
    agreed, messages = await answer(**{"Mcp-Param-Region": "eu"})
    assert agreed and calls == ["regional"] and messages[0]["status"] == 200


async def test_the_accept_check_is_the_sdks_for_every_value_and_its_memory_bounded() -> None:
    """Its verdict is kept per Accept value: a value that refuses JSON still goes to the SDK
    (its 406) after one that allowed it, and a client sending a new value on every request
    keeps no more than a few dozen of them. One `serverInfo` stamp serves every answer."""
    server: Server[Any] = Server("t")

    async def call_tool(ctx: Any, params: Any, *, progress: Any = None) -> CallToolResult:
        return CallToolResult(content=[TextContent(type="text", text="ok")])

    async def unused(*args: Any) -> Any:
        raise AssertionError("not used")

    answers = ModernAnswers(server, list_tools=unused, call_tool=call_tool, input_schema=unused)

    async def answer(accept: str) -> list[Any]:
        body, sent = _request("tools/call", {"name": "add", "arguments": {}}, Accept=accept)
        raw = [(k.lower().encode(), v.encode()) for k, v in sent.items()]
        scope = {"type": "http", "method": "POST", "headers": raw, "path": "/mcp"}
        sent_messages: list[Any] = []

        async def send(message: Any) -> None:
            sent_messages.append(message)

        await answers.answer(scope, body, send)
        return sent_messages

    for accept in ("application/json, text/event-stream", "text/event-stream", "*/*"):
        first, again = await answer(accept), await answer(accept)
        assert bool(first) == bool(again) == (accept != "text/event-stream"), accept
    stamps = [json.loads((await answer("*/*"))[1]["body"]) for _ in range(2)]
    meta = [stamp["result"]["_meta"]["io.modelcontextprotocol/serverInfo"] for stamp in stamps]
    assert meta[0] == meta[1] == server.server_info_stamp
    for n in range(500):
        assert await answer(f"application/json;q=0.{n}")
    assert len(answers._accept_verdicts) <= 64


_RESULTS: list[dict[str, Any]] = [
    {"content": [{"type": "text", "text": "4"}]},
    {"content": [{"type": "text", "text": "no such city"}], "isError": True},
    {"content": [{"type": "text", "text": 'héllo ✓ \u0000 "q"'}, {"type": "text", "text": ""}]},
    {"content": []},
    {"content": [{"type": "text", "text": "x", "annotations": {"audience": ["user"]}}]},
    {"content": [{"type": "text", "text": "x", "_meta": {"k": 1}}]},
    {"content": [{"type": "text", "text": "x"}], "structuredContent": {"n": 1}},
    {"content": [{"type": "text", "text": "x"}], "_meta": {"k": 1}},
    {"content": [{"type": "image", "data": "aGk=", "mimeType": "image/png"}]},
    {
        "content": [
            {"type": "text", "text": "x"},
            {"type": "audio", "data": "aGk=", "mimeType": "a/b"},
        ]
    },
]


@pytest.mark.parametrize("given", _RESULTS)
def test_a_text_results_wire_form_is_the_sdks_on_every_modern_version(
    given: dict[str, Any],
) -> None:
    """`text_call_result` skips the SDK's validate-and-dump for plain text results: its form
    must be the one the SDK gives (to the byte), and anything else must be left to the SDK."""
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    from app.api.mcp_modern import sieved, text_call_result

    result = CallToolResult.model_validate(given)
    fast = text_call_result(result)
    plain = all(
        block.get("type") == "text" and set(block) == {"type", "text"} for block in given["content"]
    )
    assert (fast is not None) == (plain and set(given) <= {"content", "isError"})
    for version in MODERN_PROTOCOL_VERSIONS:
        sdk = sieved("tools/call", version, result)
        sdk.pop("resultType", None)  # set by the caller of both, as the SDK's runner does
        if fast is not None:
            assert json.dumps(fast) == json.dumps(sdk)
    built = CallToolResult(content=[TextContent(type="text", text="7")])
    assert text_call_result(built) == {"content": [{"text": "7", "type": "text"}], "isError": False}


@pytest.mark.parametrize("text", ["7", "", 'a "quoted" \u00e9 line\nand more', "x" * 5000])
@pytest.mark.parametrize("is_error", [False, True])
def test_a_one_text_results_wire_form_is_the_sdks_in_both_eras(text: str, is_error: bool) -> None:
    """`TextResult.wire` writes what the SDK gives for the same `CallToolResult`, to the byte:
    sieved on every modern version, dumped for the handshake era (as the SDK's own
    `on_call_tool` path builds it, `is_error` left unset on success)."""
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS

    from app.api.mcp_endpoint import _dumped
    from app.api.mcp_modern import TextResult, sieved

    content = [TextContent(type="text", text=text)]
    model = (
        CallToolResult(content=content, is_error=True)
        if is_error
        else CallToolResult(content=content)
    )
    fast = TextResult(text, is_error)
    assert json.dumps(fast.wire(modern=False)) == json.dumps(_dumped(model))
    for version in MODERN_PROTOCOL_VERSIONS:
        sdk = sieved("tools/call", version, model)
        sdk.pop("resultType", None)
        assert json.dumps(fast.wire(modern=True)) == json.dumps(sdk)


_SHAPES: list[dict[str, Any] | None] = [
    {"name": "add", "arguments": {"a": 1}, "_meta": META},
    {"name": "add", "arguments": {"a": [1, {"b": None}], "c": "x" * 300}, "_meta": META},
    {"name": "add", "arguments": {}, "_meta": META},
    {"name": "add", "_meta": META},
    {"name": "add", "arguments": None, "_meta": META},
    {"name": "add", "arguments": [1, 2], "_meta": META},
    {"name": "add", "arguments": "x", "_meta": META},
    {"name": 7, "arguments": {"a": 1}, "_meta": META},
    {"arguments": {"a": 1}, "_meta": META},
    {
        "name": "add",
        "arguments": {"a": 1},
        "_meta": {**META, "io.modelcontextprotocol/clientCapabilities": 3},
    },
    {"name": "add", "arguments": {"a": 1}, "_meta": {**META, "pad": "p" * 5000}},  # not kept
    {"name": "add", "arguments": {"a": 1}, "_meta": META, "task": {"ttl": "soon"}},
    {"name": "add", "arguments": {"a": 1}, "_meta": META, "extra": True},
    {"cursor": 5, "_meta": META},
    None,
]


@pytest.mark.parametrize("method", ["tools/call", "tools/list", "server/discover"])
def test_a_kept_validation_verdict_is_the_sdks_for_every_shape(method: str) -> None:
    """The SDK's request validation is kept per shape of the params (the values of a call's
    `arguments` aside): in any order, repeated, every verdict must be the SDK's own."""
    from mcp_types import methods as mcp_methods

    def sdk(params: dict[str, Any] | None) -> bool:
        try:
            mcp_methods.validate_client_request(method, MODERN, params)
        except (KeyError, ValueError):
            return False
        return True

    answers = ModernAnswers(Server("t"), list_tools=None, call_tool=None, input_schema=None)  # type: ignore[arg-type]
    for params in [*_SHAPES, *reversed(_SHAPES), *_SHAPES]:
        shape = _shape(method, params)
        assert answers._valid_as(method, MODERN, params, shape) is sdk(params), params
    verdicts = {sdk(p) for p in _SHAPES}
    assert verdicts == {True, False}  # both kinds of shape are exercised
    assert len(answers._verdicts) < len(_SHAPES)  # the long envelope was not kept


_ROUTED = [
    {},
    {"Mcp-Name": "other"},
    {"Mcp-Method": "tools/list"},
    {"MCP-Protocol-Version": "2025-06-18"},
    {"MCP-Protocol-Version": "1999-01-01"},
]


@pytest.mark.parametrize("method", ["tools/call", "tools/list"])
def test_a_kept_routing_verdict_is_the_sdks_for_every_header_and_shape(method: str) -> None:
    """The SDK's ladder (a routing header sent twice, then `classify_inbound_request`) is kept
    per routing headers and shape of the params: for each combination, in any order and
    repeated, the version it routes by (or its refusal) must be the SDK's own."""
    from mcp.shared.inbound import (
        InboundLadderRejection,
        classify_inbound_request,
        find_duplicated_routing_header,
    )

    from app.api.mcp_modern import _shape

    def sdk(message: dict[str, Any], pairs: list[tuple[str, str]]) -> str | None:
        if find_duplicated_routing_header(pairs) is not None:
            return None
        first: dict[str, str] = {}
        for name, value in pairs:
            first.setdefault(name, value)
        verdict = classify_inbound_request(message, headers=first)
        return None if isinstance(verdict, InboundLadderRejection) else verdict.protocol_version

    answers = ModernAnswers(Server("t"), list_tools=None, call_tool=None, input_schema=None)  # type: ignore[arg-type]
    cases = []
    for params in _SHAPES:
        for extra in _ROUTED:
            name = params.get("name") if isinstance(params, dict) else None
            sent = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method, "Accept": "*/*"}
            if method == "tools/call" and isinstance(name, str):
                sent["Mcp-Name"] = name
            sent.update(extra)
            pairs = [(k.lower(), v) for k, v in sent.items()]
            cases.append(({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}, pairs))
        twice = [*cases[-1][1], ("mcp-method", method)]  # a routing header sent twice
        cases.append((cases[-1][0], twice))
    routed = set()
    for message, pairs in [*cases, *reversed(cases), *cases]:
        first: dict[str, str] = {}
        for header, value in pairs:
            first.setdefault(header, value)
        shape = _shape(method, message["params"])
        got = answers._ladder(message, pairs, first, shape)
        assert got == sdk(message, pairs), (message, pairs)
        routed.add(got)
    assert MODERN in routed and None in routed  # both outcomes exercised
