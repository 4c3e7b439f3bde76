"""Model requests join each offered tool's JSON, made once with the tool (issue 49): the body
is the same JSON as one serialized whole, and no schema is serialized per call."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from app.chat.http_model_client import ChatCompletionsAPI
from app.chat.model import PreparedTools, ToolChoice
from app.services.catalog import ToolSnapshot
from tests.support.catalogs import filler

MESSAGES = [{"role": "user", "content": "hi \u2603"}]


def typed_tools(count: int) -> list[Any]:
    return list(ToolSnapshot.build(filler(count, "https://api.example.com/x")).enabled)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("choice", ["auto", "none"])
def test_a_prepared_body_is_the_json_of_the_plain_one(
    stream: bool, parallel: bool, choice: ToolChoice
) -> None:
    tools = typed_tools(30)
    extra = {"type": "function", "function": {"name": "search_tools", "parameters": {}}}
    prepared = PreparedTools.of(tools, [extra])
    plain = [tool.schema for tool in tools] + [extra]
    api = ChatCompletionsAPI()
    options = {"parallel_tool_calls": parallel, "stream": stream, "tool_choice": choice}
    sent = api.body(model="m", messages=MESSAGES, tools=prepared, **options)
    whole = api.body(model="m", messages=MESSAGES, tools=plain, **options)
    assert orjson.loads(sent) == orjson.loads(whole)
    assert prepared == plain  # every other reader sees the same list


def test_no_schema_is_serialized_when_a_request_is_made(monkeypatch: pytest.MonkeyPatch) -> None:
    tools = typed_tools(50)
    prepared = PreparedTools.of(tools)
    dumped: list[Any] = []
    real = orjson.dumps

    def counting(value: Any, *args: Any, **kwargs: Any) -> bytes:
        dumped.append(value)
        return real(value, *args, **kwargs)

    monkeypatch.setattr(orjson, "dumps", counting)
    ChatCompletionsAPI().body(
        model="m", messages=MESSAGES, tools=prepared, parallel_tool_calls=True, stream=False
    )
    [payload] = dumped  # the model and messages only: the tools' bytes were made before
    assert "tools" not in payload
