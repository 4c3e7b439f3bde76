"""One input gate (`json_problem`) for free-form JSON on every entry point: `/chat`, invoke,
`/mcp` `tools/call` and the model's own tool calls. Refused before anything runs or is recorded;
the tenant's other records are never taken with it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from app.schemas.fields import MAX_JSON_DEPTH, json_problem
from tests.support import fake_model as script
from tests.support.chat_clients import McpChat
from tests.support.waiting import within

HUGE = 2**64


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (nested(MAX_JSON_DEPTH), None),
        (nested(MAX_JSON_DEPTH + 1), "nested deeper than 32 levels"),
        (nested(5000), "nested deeper than 32 levels"),  # no recursion error
        ({"n": HUGE, "x\x00y": True}, None),  # valid JSON; records keep them reduced
        ({"k" * 1025: 1}, "an object key is longer than 1024 characters"),
        ({"f": float("nan")}, "a number that is not finite"),
        ([0] * 100_001, "more than 100000 values"),
    ],
)
def test_the_gate(value: Any, problem: str | None) -> None:
    assert json_problem(value) == problem


async def _rpc(mcp_chat: McpChat, **params: Any) -> Any:
    message = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params}
    response = await mcp_chat.http.post("/mcp", json=message, headers=mcp_chat.tenant.headers)
    assert response.status_code == 200, response.text
    return response.json()


async def _run_count(mcp_chat: McpChat) -> int:
    listed = await mcp_chat.http.get("/runs", headers=mcp_chat.tenant.headers)
    assert listed.status_code == 200, listed.text
    return len(listed.json()["items"])


@pytest.mark.parametrize(
    "arguments", [{"d": nested(500)}, {"d": nested(900)}, {"d": [0] * 100_001}]
)
async def test_mcp_tools_call_goes_through_the_gate(
    mcp_chat: McpChat, arguments: dict[str, Any]
) -> None:
    await mcp_chat.call(script.tool_calls(("roll_dice", {"d": 6})), script.text("ok"))
    await within(lambda: _has_runs(mcp_chat, 1), 10)
    answer = await _rpc(mcp_chat, name="roll_dice", arguments=arguments)
    assert answer["error"]["code"] == -32602, answer
    assert "arguments" in answer["error"]["message"]
    # nothing ran and nothing was recorded; the earlier chat's record is still listed
    invoked = await mcp_chat.http.post(
        "/tools/rolldice/invoke", json={"arguments": {"d": 6}}, headers=mcp_chat.tenant.headers
    )
    assert invoked.status_code == 200
    await within(lambda: _has_runs(mcp_chat, 2), 10)
    listed = await mcp_chat.http.get("/runs", headers=mcp_chat.tenant.headers)
    assert [run["kind"] for run in listed.json()["items"]] == ["invoke", "chat"]


async def _has_runs(mcp_chat: McpChat, count: int) -> bool:
    return await _run_count(mcp_chat) == count


async def test_invoke_and_the_model_go_through_the_same_gate(mcp_chat: McpChat) -> None:
    deep = {"arguments": {"d": nested(MAX_JSON_DEPTH + 1)}}
    invoked = await mcp_chat.http.post(
        "/tools/rolldice/invoke", json=deep, headers=mcp_chat.tenant.headers
    )
    assert invoked.status_code == 422 and "nested deeper than 32 levels" in invoked.text
    arguments = orjson.dumps({"d": nested(MAX_JSON_DEPTH + 1)}).decode()
    body = await mcp_chat.call(script.tool_calls(("roll_dice", arguments)), script.text("ok"))
    [call] = body["tool_calls"]
    assert call["status"] == "error" and "nested deeper than 32 levels" in call["error"]
