"""Each model API's conversions on their own: what goes on the wire for a given conversation."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from app.chat.anthropic_api import AnthropicMessagesAPI, anthropic_messages
from app.chat.apis import build_model_api
from app.chat.model import CHAT_COMPLETIONS_IDS, ConvertedTools, ModelUpstreamError, finished
from app.chat.responses_api import ResponsesAPI
from tests.support import model_rules

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Adds.",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
        },
    }
]
CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "developer", "content": "Use tools."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        ],
    },
    {
        "role": "assistant",
        "content": "Adding.",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}},
            {"id": "c2", "type": "function", "function": {"name": "add", "arguments": "{oops"}},
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "1"},
    {"role": "tool", "tool_call_id": "c2", "content": "Error: the arguments are not valid JSON"},
    {"role": "user", "content": "and?"},
]


def test_anthropic_messages_conversion() -> None:
    system, turns = anthropic_messages(CONVERSATION)
    assert system == "Be brief.\n\nUse tools."
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    image = turns[0]["content"][1]
    assert image == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
    }
    assert turns[1]["content"] == [
        {"type": "text", "text": "Adding."},
        {"type": "tool_use", "id": "c1", "name": "add", "input": {"a": 1}},
        {"type": "tool_use", "id": "c2", "name": "add", "input": {}},  # malformed: sent as {}
    ]
    results, question = turns[2]["content"][:2], turns[2]["content"][2]
    assert results == [
        {"type": "tool_result", "tool_use_id": "c1", "content": "1"},
        {
            "type": "tool_result",
            "tool_use_id": "c2",
            "content": "Error: the arguments are not valid JSON",
            "is_error": True,
        },
    ]
    assert question == {"type": "text", "text": "and?"}  # merged: one user turn


def test_anthropic_body() -> None:
    api = AnthropicMessagesAPI(max_tokens=99)
    body = orjson.loads(
        api.body(
            model="m", messages=CONVERSATION, tools=TOOLS, parallel_tool_calls=False, stream=True
        )
    )
    assert (body["max_tokens"], body["stream"]) == (99, True)
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert body["tools"] == [
        {
            "name": "add",
            "description": "Adds.",
            "input_schema": TOOLS[0]["function"]["parameters"],
            "cache_control": {"type": "ephemeral"},
        }
    ]
    assert api.headers("sk")["x-api-key"] == "sk" and "anthropic-version" in api.headers("sk")


@pytest.mark.parametrize(
    ("api", "choice"),
    [
        ("chat_completions", "none"),
        ("responses", "none"),
        ("anthropic_messages", {"type": "none"}),
    ],
)
def test_a_turn_that_may_call_no_tool_keeps_the_tools(api: str, choice: Any) -> None:
    """The last turn of a chat: the tools stay (the history holds tool use), none may be called,
    and nothing else about calls is sent (`parallel_tool_calls` belongs to calls allowed)."""
    body = orjson.loads(
        build_model_api(api, max_tokens=99).body(  # type: ignore[arg-type]
            model="m",
            messages=CONVERSATION,
            tools=TOOLS,
            parallel_tool_calls=False,
            stream=False,
            tool_choice="none",
        )
    )
    assert body["tools"] and body["tool_choice"] == choice
    assert "parallel_tool_calls" not in body
    path = {"chat_completions": "/chat/completions", "responses": "/responses"}.get(api)
    assert model_rules.problems(path or "/messages", body) == []


# Ids of other models and gateways, and the part each API keeps of them (None: sent as it is).
FOREIGN = {
    "anthropic_messages": {"functions.add:0": "functions_add_0_", "x" * 65: "x" * 47 + "_"},
    "chat_completions": {"functions.add:0": None, "x" * 41: "x" * 23 + "_"},
}


@pytest.mark.parametrize("api", sorted(FOREIGN))
def test_ids_outside_an_apis_alphabet_are_sent_as_stand_ins(api: str) -> None:
    ids = FOREIGN[api]
    calls = [
        {"id": call_id, "type": "function", "function": {"name": "add", "arguments": "{}"}}
        for call_id in ids
    ]
    conversation = [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        *({"role": "tool", "tool_call_id": call_id, "content": "1"} for call_id in ids),
    ]
    body = orjson.loads(
        build_model_api(api, max_tokens=99).body(  # type: ignore[arg-type]
            model="m", messages=conversation, tools=TOOLS, parallel_tool_calls=True, stream=False
        )
    )
    if api == "anthropic_messages":
        uses = [b["id"] for b in body["messages"][1]["content"]]
        results = [b["tool_use_id"] for b in body["messages"][2]["content"]]
    else:
        uses = [c["id"] for c in body["messages"][1]["tool_calls"]]
        results = [m["tool_call_id"] for m in body["messages"][2:]]
    assert uses == results and len(set(uses)) == len(ids)  # each call matched to its result
    for (original, kept), sent in zip(ids.items(), uses, strict=True):
        assert sent == original if kept is None else sent.startswith(kept)
    path = "/messages" if api == "anthropic_messages" else "/chat/completions"
    assert model_rules.problems(path, body) == []
    assert conversation[1]["tool_calls"][0]["id"] == "functions.add:0"  # the caller's, unchanged


def test_ids_an_api_accepts_are_sent_as_they_are() -> None:
    assert CHAT_COMPLETIONS_IDS("call_Xy.1:é") == "call_Xy.1:é"  # any character, up to 40
    messages = [{"role": "tool", "tool_call_id": "toolu_01", "content": "1"}]
    api = build_model_api("anthropic_messages", max_tokens=1)
    body = orjson.loads(
        api.body(model="m", messages=messages, tools=TOOLS, parallel_tool_calls=True, stream=False)
    )
    assert body["messages"][0]["content"][0]["tool_use_id"] == "toolu_01"


def test_responses_input_conversion() -> None:
    api = ResponsesAPI()
    body = orjson.loads(
        api.body(
            model="m", messages=CONVERSATION, tools=TOOLS, parallel_tool_calls=True, stream=False
        )
    )
    items = body["input"]
    assert items[:2] == [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": "Use tools."},
    ]
    assert items[2]["content"] == [
        {"type": "input_text", "text": "look"},
        {"type": "input_image", "image_url": "data:image/png;base64,AAAA"},
    ]
    assert items[3:] == [
        {"role": "assistant", "content": "Adding."},
        {"type": "function_call", "call_id": "c1", "name": "add", "arguments": '{"a": 1}'},
        {"type": "function_call", "call_id": "c2", "name": "add", "arguments": "{oops"},
        {"type": "function_call_output", "call_id": "c1", "output": "1"},
        {
            "type": "function_call_output",
            "call_id": "c2",
            "output": "Error: the arguments are not valid JSON",
        },
        {"role": "user", "content": "and?"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "name": "add",
            "description": "Adds.",
            "parameters": TOOLS[0]["function"]["parameters"],
            "strict": False,
        }
    ]
    assert "parallel_tool_calls" not in body and "stream" not in body


@pytest.mark.parametrize(
    ("response", "finish"),
    [
        ({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}, "length"),
        (
            {"status": "incomplete", "incomplete_details": {"reason": "content_filter"}},
            "content_filter",
        ),
        ({"status": "completed"}, "stop"),
    ],
)
def test_responses_stop_reasons(response: dict[str, Any], finish: str) -> None:
    text = {"type": "message", "content": [{"type": "output_text", "text": "x"}]}
    turn = ResponsesAPI().parse(orjson.dumps({"output": [text], **response}))
    assert turn.finish == finish and turn.content == "x"


def test_a_responses_refusal_is_the_answer_and_says_so() -> None:
    refusal = {"type": "message", "content": [{"type": "refusal", "refusal": "I can't."}]}
    turn = ResponsesAPI().parse(orjson.dumps({"status": "completed", "output": [refusal]}))
    assert (turn.content, turn.finish) == ("I can't.", "refusal")


def test_a_failed_response_is_an_upstream_error() -> None:
    failed = {"status": "failed", "error": {"message": "server trouble"}, "output": []}
    with pytest.raises(ModelUpstreamError, match="server trouble"):
        ResponsesAPI().parse(orjson.dumps(failed))


def test_stop_reasons_share_one_vocabulary() -> None:
    assert [finished(r) for r in ("end_turn", "max_tokens", "tool_use", "refusal")] == [
        "stop",
        "length",
        "tool_calls",
        "refusal",
    ]
    assert finished(None) is None and finished("something_new") == "something_new"


def test_tool_lists_are_converted_once_each() -> None:
    seen: list[int] = []

    def convert(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        seen.append(len(tools))
        return [dict(t) for t in tools]

    converted = ConvertedTools(convert, size=2)
    first, second, third = [{"a": 1}], [{"b": 2}, {"c": 3}], [{"d": 4}]
    assert converted(first) is converted(first)
    converted(second)
    converted(first)
    converted(third)  # evicts `second`, the least recently used
    converted(second)
    assert seen == [1, 2, 1, 2]
