"""Categories, usage hints, output shaping and presets where tools run: a chat (whole and
streamed) against the scripted model, `POST /tools/{id}/invoke` and `/mcp`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from tests.support import fake_model as script
from tests.support import toolkit
from tests.support.fake_model import FakeModel
from tests.support.servers import ThreadedServer
from tests.support.toolkit import Kit, mcp_call, offered, reshape, tool_messages, toolkit_app
from tests.support.waiting import runs_recorded

HINTS = "Use these for sales and stock questions."


@pytest.fixture
async def kit(
    fake_model_server: tuple[FakeModel, ThreadedServer], fake: FakeModel
) -> AsyncIterator[Kit]:
    toolkit.SEEN.clear()
    async with toolkit_app(fake_model_server[1].url) as running:
        yield running


def _events(text: str) -> list[tuple[str, Any]]:
    found, name = [], None
    for line in text.splitlines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            found.append((name, orjson.loads(line[6:])))
    return found


@pytest.mark.parametrize("stream", [False, True])
async def test_chats_offer_the_tools_of_enabled_categories(
    kit: Kit, fake: FakeModel, stream: bool
) -> None:
    fake.reset(repeat=script.text("ok"))
    assert (await kit.chat(stream=stream)).status_code == 200
    assert {"sales_report", "inventory", "roll_dice"} <= offered(fake.requests[-1])
    off = await kit.http.patch(
        "/categories", json={"enabled": {"reports": False}}, headers=kit.acme.headers
    )
    assert off.status_code == 200
    assert (await kit.chat(stream=stream)).status_code == 200
    names = offered(fake.requests[-1])
    assert "roll_dice" in names and not {"sales_report", "inventory"} & names
    # Categories win over tool_ids: the disabled category's tool is unavailable, as a disabled
    # tool is.
    refused = await kit.chat(stream=stream, tool_ids=["inventory", "rolldice"])
    assert refused.status_code == 422 and "inventory" in refused.text


async def test_invoke_runs_a_disabled_categorys_tool_and_mcp_does_not(kit: Kit) -> None:
    await kit.http.patch(
        "/categories", json={"enabled": {"reports": False}}, headers=kit.acme.headers
    )
    invoked = await kit.post("/tools/inventory/invoke", {"arguments": {"item": "nut"}})
    assert invoked.status_code == 200 and invoked.json()["status"] == "ok"  # admins test it
    listed = await mcp_call(kit, "tools/list", {})
    names = {tool["name"] for tool in listed["result"]["tools"]}
    assert "roll_dice" in names and "inventory" not in names
    called = await mcp_call(kit, "tools/call", {"name": "inventory", "arguments": {"item": "x"}})
    assert "error" in called or called["result"]["isError"] is True


@pytest.mark.parametrize("stream", [False, True])
async def test_usage_hints_are_one_system_message_as_hints_show_it(
    kit: Kit, fake: FakeModel, stream: bool
) -> None:
    headers = kit.acme.headers
    await kit.http.put("/categories/reports", json={"usage_hints": HINTS}, headers=headers)
    shown = (await kit.http.get("/categories/hints", headers=headers)).json()
    assert shown["content"] == f"## reports tools\n{HINTS}"
    fake.reset(repeat=script.text("ok"))
    mine = {"role": "system", "content": "You are terse."}
    user = {"role": "user", "content": "hi"}
    assert (await kit.chat(messages=[mine, user], stream=stream)).status_code == 200
    sent = fake.requests[-1]["messages"]
    assert sent == [mine, {"role": "system", "content": shown["content"]}, user]
    assert (await kit.chat(messages=[user], stream=stream, category_hints=False)).status_code == 200
    assert fake.requests[-1]["messages"] == [user]
    # only the categories in play: a chat of roll_dice alone gets no block
    assert (await kit.chat(messages=[user], tool_ids=["rolldice"])).status_code == 200
    assert fake.requests[-1]["messages"] == [user]


@pytest.mark.parametrize("stream", [False, True])
async def test_select_and_max_chars_shape_what_the_model_reads(
    kit: Kit, fake: FakeModel, stream: bool
) -> None:
    assert (await reshape(kit, "inventory", output={"select": "stock[].count"})).status_code == 200
    fake.reset(script.tool_calls(("inventory", {"item": "nut"})), script.text("done"))
    answer = await kit.chat(stream=stream)
    assert answer.status_code == 200
    assert tool_messages(fake.requests[-1]) == ["[3,5]"]
    await reshape(kit, "inventory", output={"max_chars": 12})
    fake.reset(script.tool_calls(("inventory", {"item": "nut"})), script.text("done"))
    await kit.chat(stream=stream)
    [cut] = tool_messages(fake.requests[-1])
    assert cut.startswith('{"item":"nut') and "[truncated:" in cut


async def test_a_select_that_does_not_apply_leaves_the_output_and_says_so(
    kit: Kit, fake: FakeModel
) -> None:
    await reshape(kit, "plain", output={"select": "a.b"})
    await reshape(kit, "inventory", output={"select": "nothing.here"})
    fake.reset(
        script.tool_calls(("plain_text", {}), ("inventory", {"item": "nut"})), script.text("ok")
    )
    answer = (await kit.chat()).json()
    assert tool_messages(fake.requests[-1])[0] == "just words, not JSON"
    notes = [call["note"] for call in answer["tool_calls"]]
    assert notes == [
        "output.select not applied: the result is not JSON",
        "output.select not applied: the expression matched nothing",
    ]
    runs = await runs_recorded(kit.http, kit.acme.headers, 1)
    assert [c["note"] for c in runs[0]["tool_calls"]] == notes
    invoked = (await kit.post("/tools/plain/invoke", {})).json()
    assert invoked["content"] == "just words, not JSON"
    assert invoked["note"] == "output.select not applied: the result is not JSON"


async def test_post_processor_runs_and_redaction_runs_last(kit: Kit, fake: FakeModel) -> None:
    region = "region-emea-7"  # a context value: hidden from the model whatever shaped the output
    fake.reset(script.tool_calls(("sales_report", {"limit": 2})), script.text("ok"))
    answer = await kit.chat(context_arguments={"region": region})
    assert answer.status_code == 200
    [content] = tool_messages(fake.requests[-1])
    assert orjson.loads(content) == {"names": ["[redacted]-0", "[redacted]-1"], "tool": "sales"}
    assert "margin" not in content and region not in answer.text
    await reshape(kit, "sales", output={"select": "names[0]"})
    invoked = await kit.post(
        "/tools/sales/invoke", {"arguments": {"limit": 1}, "context_arguments": {"region": region}}
    )
    assert invoked.json()["content"] == "[redacted]-0"
    broken = (await kit.post("/tools/broken-post/invoke", {})).json()
    assert broken["status"] == "error"
    assert broken["error"]["message"].startswith("the post-processor failed: RuntimeError")


async def test_a_tools_own_timeout(kit: Kit, fake: FakeModel) -> None:
    assert (await reshape(kit, "nap", timeout_s=0.1)).status_code == 200
    invoked = (await kit.post("/tools/nap/invoke", {"arguments": {"seconds": 3}})).json()
    assert invoked["error"] == {
        "kind": "timeout",
        "message": "the tool did not finish within 0.1 s",
    }
    fake.reset(script.tool_calls(("nap", {"seconds": 3})), script.text("ok"))
    answer = (await kit.chat()).json()
    assert answer["tool_calls"][0]["error"] == "Error: the tool did not finish within 0.1 s"


PRESETS = [
    {"name": "base_path", "type": "string", "value": "/srv/pages"},
    {"name": "retries", "type": "integer", "value": 3},
]


@pytest.mark.parametrize("stream", [False, True])
async def test_presets_reach_the_function_never_the_model_nor_from_the_caller(
    kit: Kit, fake: FakeModel, stream: bool
) -> None:
    assert (await reshape(kit, "fetch-page", context_parameters=PRESETS)).status_code == 200
    fake.reset(
        script.tool_calls(("fetch_page", {"page": "a", "base_path": "/etc"})), script.text("ok")
    )
    caller = {"base_path": "/etc/shadow", "retries": 99}
    answer = await kit.chat(stream=stream, context_arguments=caller)
    assert answer.status_code == 200
    [schema] = [t for t in fake.requests[0]["tools"] if t["function"]["name"] == "fetch_page"]
    assert set(schema["function"]["parameters"]["properties"]) == {"page"}
    assert toolkit.SEEN == [{"page": "a", "base_path": "/srv/pages", "retries": 3}]
    [content] = tool_messages(fake.requests[-1])
    assert "/srv/pages" not in content and "/srv/pages" not in answer.text  # hidden, like context
    invoked = await kit.post(
        "/tools/fetch-page/invoke", {"arguments": {"page": "b"}, "context_arguments": caller}
    )
    assert invoked.json()["status"] == "ok"
    called = await mcp_call(kit, "tools/call", {"name": "fetch_page", "arguments": {"page": "c"}})
    assert called["result"]["isError"] is False
    assert [seen["base_path"] for seen in toolkit.SEEN] == ["/srv/pages"] * 3
    assert [seen["retries"] for seen in toolkit.SEEN] == [3] * 3


async def test_mcp_serves_shaped_output(kit: Kit) -> None:
    await reshape(kit, "inventory", output={"select": "stock[?count > `4`].warehouse"})
    called = await mcp_call(kit, "tools/call", {"name": "inventory", "arguments": {"item": "x"}})
    assert called["result"]["content"][0]["text"] == '["south"]'


async def test_a_preset_wins_over_a_client_tokens_bound_value(kit: Kit) -> None:
    await reshape(kit, "fetch-page", context_parameters=PRESETS)
    body = {"name": "alice", "context_arguments": {"base_path": "/token/path"}}
    made = await kit.post("/client-tokens", body)
    assert made.status_code == 201, made.text
    headers = {
        "Authorization": f"Bearer {made.json()['token']}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    call = {"name": "fetch_page", "arguments": {"page": "t"}}
    envelope = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}
    answer = await kit.http.post("/mcp", json=envelope, headers=headers)
    assert answer.json()["result"]["isError"] is False, answer.text
    assert toolkit.SEEN == [{"page": "t", "base_path": "/srv/pages", "retries": 3}]
