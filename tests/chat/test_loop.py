"""The loop through the real `openai` SDK against the scripted fake model."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import fake_model as script
from tests.support.chat_clients import ChatClient
from tests.support.fake_model import FakeModel


def tool_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in body["messages"] if m["role"] == "tool"]


async def test_plain_answer(chat: ChatClient, fake: FakeModel) -> None:
    fake.reset(script.text("Hello there"))
    response = await chat.chat(
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["message"] == {"role": "assistant", "content": "Hello there"}
    assert body["stop_reason"] == "completed" and body["iterations"] == 1
    assert body["tool_calls"] == []
    assert body["usage"] == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant"]
    sent = fake.requests[0]
    assert sent["model"] == "gpt-4o-mini" and sent["tool_choice"] == "auto"
    assert "parallel_tool_calls" not in sent  # only sent when turned off


async def test_tools_sent_to_the_model(chat: ChatClient, fake: FakeModel) -> None:
    fake.reset(script.text("ok"))
    await chat.chat(tool_ids=["profile", "lister"], model="my-model")
    sent = fake.requests[0]
    assert sent["model"] == "my-model"
    by_name = {t["function"]["name"]: t["function"] for t in sent["tools"]}
    assert set(by_name) == {"get_profile", "count_items"}
    profile = by_name["get_profile"]["parameters"]
    assert profile == {
        "type": "object",
        "additionalProperties": False,
        "required": [],
        "properties": {"field": {"type": "string", "description": "Which field to read."}},
    }  # user_id and api_token are context parameters: stripped
    await chat.http.put(
        "/tools/lister",
        headers=chat.tenant.headers,
        json={
            "type": "function",
            "function": {
                "name": "count_items",
                "parameters": {
                    "properties": {
                        "items": {
                            "type": "array",
                            "items": {"type": "string"},
                            "min_items": 1,
                            "max_items": 3,
                        },
                        "mode": {"type": "string", "enum": ["count"]},
                    },
                    "required": ["items"],
                },
            },
        },
    )
    fake.reset(script.text("ok"))
    await chat.chat(tool_ids=["lister"])
    items = fake.requests[0]["tools"][0]["function"]["parameters"]["properties"]["items"]
    assert items == {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3}


async def test_one_tool_call(chat: ChatClient, fake: FakeModel) -> None:
    fake.reset(script.tool_calls(("roll_dice", {"d": 6})), script.text("You rolled it."))
    body = (await chat.chat()).json()
    assert body["iterations"] == 2 and body["stop_reason"] == "completed"
    [call] = body["tool_calls"]
    assert call["name"] == "roll_dice" and call["arguments"] == {"d": 6}
    assert call["status"] == "ok" and call["error"] is None and call["duration_ms"] >= 0
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool", "assistant"]
    assistant, tool = body["messages"][1], body["messages"][2]
    assert assistant["tool_calls"][0]["id"] == call["id"] == tool["tool_call_id"]
    assert 1 <= int(tool["content"]) <= 6
    # The model's second call carries the whole conversation, tool result included.
    assert fake.requests[1]["messages"][2] == tool


async def test_tool_calls_reported_with_finish_reason_stop(
    chat: ChatClient, fake: FakeModel
) -> None:
    fake.reset(script.tool_calls(("roll_dice", {"d": 2}), finish_reason="stop"), script.text("ok"))
    body = (await chat.chat()).json()
    assert body["iterations"] == 2 and body["tool_calls"][0]["status"] == "ok"


async def test_chain_across_iterations(chat: ChatClient, fake: FakeModel) -> None:
    fake.reset(
        script.tool_calls(("add", {"a": 2, "b": 3})),
        script.tool_calls(("add", {"a": 5, "b": 4})),
        script.text("9"),
    )
    body = (await chat.chat()).json()
    assert body["iterations"] == 3
    assert [m["content"] for m in tool_messages(body)] == ["5", "9"]
    assert body["usage"]["total_tokens"] == 45


@pytest.mark.parametrize("parallel", [True, False])
async def test_several_calls_keep_order_and_run_in_parallel_unless_told(
    chat: ChatClient, fake: FakeModel, parallel: bool
) -> None:
    fake.reset(
        script.tool_calls(
            ("sleep_async", {"seconds": 0.4}),
            ("add", {"a": 1, "b": 1}),
            ("sleep_async", {"seconds": 0.4}),
        ),
        script.text("done"),
    )
    body = (await chat.chat(parallel_tool_calls=parallel)).json()
    assert [m["content"] for m in tool_messages(body)] == ["slept", "2", "slept"]
    assert [m["tool_call_id"] for m in tool_messages(body)] == [c["id"] for c in body["tool_calls"]]
    from tests.support.functions import TIMELINE

    (_, first_end), (second_start, _) = sorted(TIMELINE)
    overlapped = second_start < first_end
    assert overlapped is parallel
    if not parallel:
        assert fake.requests[0]["parallel_tool_calls"] is False


async def test_blocking_functions_run_off_the_event_loop(chat: ChatClient, fake: FakeModel) -> None:
    fake.reset(
        script.tool_calls(
            ("sleep_blocking", {"seconds": 0.4}),
            ("sleep_blocking", {"seconds": 0.4}),
            ("sleep_async", {"seconds": 0.4}),
        ),
        script.text("ok"),
    )
    body = (await chat.chat()).json()
    assert [c["status"] for c in body["tool_calls"]] == ["ok"] * 3
    from tests.support.functions import TIMELINE

    # All three overlapped: neither blocking sleep held the loop or the other.
    latest_start = max(start for start, _ in TIMELINE)
    earliest_end = min(end for _, end in TIMELINE)
    assert latest_start < earliest_end


async def test_model_that_never_stops(chat: ChatClient, fake: FakeModel) -> None:
    fake.reset(repeat=script.tool_calls(("roll_dice", {"d": 6})))
    body = (await chat.chat(max_iterations=3)).json()
    assert len(fake.requests) == 3 and body["iterations"] == 3
    # Its last turn was told to call nothing (the tools kept) and called anyway: no answer.
    assert (body["stop_reason"], body["finish_reason"]) == ("no_answer", "tool_calls")
    assert [r.get("tool_choice") for r in fake.requests] == ["auto", "auto", "none"]
    assert all("tools" in request for request in fake.requests)
    assert len(body["tool_calls"]) == 2  # the third answer's tool calls were not run
    assert body["message"] == {"role": "assistant", "content": ""}


@pytest.mark.settings(chat_max_iterations=4)
async def test_iteration_cap(chat: ChatClient, fake: FakeModel) -> None:
    over = await chat.chat(max_iterations=5)
    assert over.status_code == 422 and over.json()["errors"][0]["path"] == "$.max_iterations"
    fake.reset(*[script.tool_calls(("roll_dice", {"d": 6}))] * 3, script.text("Enough."))
    body = (await chat.chat()).json()
    assert body["iterations"] == 4 and body["stop_reason"] == "max_iterations"


FAILURES = [
    pytest.param(("nope", {}), "unknown tool 'nope'", id="unknown-tool"),
    pytest.param(("", {}), "the tool call has no function name", id="no-name"),
    pytest.param(("roll_dice", "{not json"), "the arguments are not valid JSON", id="bad-json"),
    pytest.param(("roll_dice", "[1, 2]"), "the arguments must be a JSON object", id="not-object"),
    pytest.param(
        ("roll_dice", {"d": "six", "extra": 1}),
        "invalid arguments: unknown argument 'extra'; 'd' must be an integer",
        id="schema",
    ),
    pytest.param(("roll_dice", {}), "missing required argument 'd'", id="missing-required"),
    pytest.param(("roll_dice", {"d": True}), "'d' must be an integer", id="bool-is-not-int"),
    pytest.param(
        ("roll_dice", {"d": 1}), "ValueError: d must be between 2 and 1000000", id="exception"
    ),
    pytest.param(("explode", {"reason": "test"}), "RuntimeError: kaboom: test", id="raises"),
    pytest.param(
        ("count_items", {"items": ["a", 2]}), "'items[1]' must be a string", id="array-item"
    ),
]


@pytest.mark.parametrize(("call", "message"), FAILURES)
async def test_tool_failures_go_back_to_the_model(
    chat: ChatClient, fake: FakeModel, call: tuple[str, Any], message: str
) -> None:
    fake.reset(script.tool_calls(call), script.text("sorry"))
    response = await chat.chat()
    assert response.status_code == 200, response.text
    body = response.json()
    [record] = body["tool_calls"]
    assert record["status"] == "error" and message in record["error"], record["error"]
    assert tool_messages(body)[0]["content"].startswith("Error: ")
    assert "Traceback" not in response.text
    assert message in fake.requests[1]["messages"][-1]["content"]  # the model can read it


@pytest.mark.settings(tool_timeout_s=0.3)
async def test_tool_timeout(chat: ChatClient, fake: FakeModel) -> None:
    fake.reset(
        script.tool_calls(("sleep_async", {"seconds": 5}), ("sleep_blocking", {"seconds": 1})),
        script.text("ok"),
    )
    body = (await chat.chat()).json()
    assert [c["error"] for c in body["tool_calls"]] == [
        "Error: the tool did not finish within 0.3 s"
    ] * 2


@pytest.mark.settings(tool_output_max_chars=1000)
async def test_tool_output_is_capped_with_a_marker(chat: ChatClient, fake: FakeModel) -> None:
    fake.reset(script.tool_calls(("big_output", {"size": 5000})), script.text("ok"))
    body = (await chat.chat()).json()
    content = tool_messages(body)[0]["content"]
    assert content.startswith("y" * 1000) and content.endswith("[truncated: 4000 more characters]")


async def test_selection_by_ids_and_tags(chat: ChatClient, fake: FakeModel) -> None:
    unknown = await chat.chat(tool_ids=["rolldice", "ghost"])
    assert unknown.status_code == 422 and "ghost" in unknown.json()["errors"][0]["message"]
    await chat.http.put(
        "/tools/adder",
        headers=chat.tenant.headers,
        json={
            "type": "function",
            "tags": ["math"],
            "enabled": False,
            "function": {
                "name": "add",
                "parameters": {
                    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                    "required": ["a", "b"],
                },
            },
        },
    )
    disabled = await chat.chat(tool_ids=["adder"])
    assert disabled.status_code == 422
    fake.reset(script.text("ok"))
    await chat.chat()
    assert "add" not in {t["function"]["name"] for t in fake.requests[0]["tools"]}
    await chat.http.put(
        "/tools/lister",
        headers=chat.tenant.headers,
        json={
            "type": "function",
            "tags": ["math"],
            "function": {
                "name": "count_items",
                "parameters": {
                    "properties": {"items": {"type": "array"}, "mode": {"type": "string"}},
                    "required": ["items"],
                },
            },
        },
    )
    fake.reset(script.text("ok"))
    await chat.chat(tags=["math"])
    assert [t["function"]["name"] for t in fake.requests[0]["tools"]] == ["count_items"]


CANARY = "CANARY-7f3a9c1e-secret"


async def test_context_injection_and_canary(
    chat: ChatClient, fake: FakeModel, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    from tests.support.functions import RECEIVED

    fake.reset(
        script.tool_calls(
            ("get_profile", {"field": "email", "user_id": "u-evil", "api_token": "model-guess"})
        ),
        script.tool_calls(("leak_token", {})),
        script.text("done"),
    )
    response = await chat.chat(
        context_arguments={"user_id": "u-42", "api_token": CANARY},
        tool_ids=["profile", "leaky"],
    )
    assert response.status_code == 200, response.text
    assert RECEIVED == [{"user_id": "u-42", "api_token": CANARY, "field": "email"}]
    body = response.json()
    assert body["tool_calls"][0]["arguments"] == {"field": "email"}  # model's overrides dropped
    assert tool_messages(body)[1]["content"] == "debug: called with token [redacted]"
    model_traffic = b"".join(fake.raw_requests)
    assert CANARY.encode() not in model_traffic
    assert b"u-42" not in model_traffic
    assert CANARY not in response.text
    assert CANARY not in caplog.text


async def test_missing_context_argument_is_named_and_the_tool_not_called(
    chat: ChatClient, fake: FakeModel
) -> None:
    from tests.support.functions import RECEIVED

    fake.reset(script.tool_calls(("get_profile", {})), script.text("sorry"))
    body = (await chat.chat(context_arguments={"user_id": "u-42"})).json()
    assert "missing context argument 'api_token'" in body["tool_calls"][0]["error"]
    assert RECEIVED == []


async def test_optional_context_and_wrong_context_type(chat: ChatClient, fake: FakeModel) -> None:
    fake.reset(script.tool_calls(("greet", {"name": "Ada"})), script.text("ok"))
    body = (await chat.chat()).json()
    assert tool_messages(body)[0]["content"] == "Hello Ada"
    fake.reset(script.tool_calls(("greet", {"name": "Ada"})), script.text("ok"))
    body = (await chat.chat(context_arguments={"locale": "fr"})).json()
    assert tool_messages(body)[0]["content"] == "Bonjour Ada"
    fake.reset(script.tool_calls(("greet", {"name": "Ada"})), script.text("ok"))
    body = (await chat.chat(context_arguments={"locale": 12345})).json()
    error = body["tool_calls"][0]["error"]
    assert "context argument 'locale' must be of type string" in error and "12345" not in error


@pytest.mark.parametrize(
    "body",
    [
        {"messages": []},
        {"messages": [{"role": "wizard", "content": "x"}]},
        {"messages": [{"role": "user", "content": "x"}], "max_iterations": 0},
        {"messages": [{"role": "user", "content": "x"}], "context_arguments": {"a b": "x"}},
        {"messages": [{"role": "user", "content": "x"}], "tenant_id": "acme"},
        {"messages": [{"role": "user", "content": "x"}], "context_arguments": {"k": {"x": 1}}},
    ],
)
async def test_bad_chat_requests_are_422(chat: ChatClient, body: dict[str, Any]) -> None:
    response = await chat.http.post("/chat", json=body, headers=chat.tenant.headers)
    assert response.status_code == 422, response.text


async def test_chat_requires_a_tenant_key(chat: ChatClient) -> None:
    no_key = await chat.http.post("/chat", json={"messages": [{"role": "user", "content": "x"}]})
    assert no_key.status_code == 401
    admin = await chat.http.post(
        "/chat",
        json={"messages": [{"role": "user", "content": "x"}]},
        headers={"Authorization": "Bearer " + "test-admin-key-0123456789abcdef0123456789"},
    )
    assert admin.status_code == 403
