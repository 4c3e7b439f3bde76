"""Large model answers (issue 43, M4), on every model API: past MODEL_ANSWER_MAX_BYTES refused
unread with an answer that says so; a large one under it parsed in the worker process, off the
event loop (the loop watchdog fails any of these tests whose app stalled past 250 ms); and a
model endpoint that redirects is said to redirect."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.chat.test_model_apis import api, chat  # the same chat on each API
from tests.support import fake_apis
from tests.support.chat_clients import ChatClient
from tests.support.fake_model import FakeModel, Reply
from tests.support.loop_watchdog import BOUND_S, LagProbe

__all__ = ["api", "chat"]

HUGE = 60_000_000  # the 60 MB answer
LARGE = 3_000_000  # under the default cap, far over the worker's threshold


def _answer(api: str, content: str, **extra: Any) -> bytes:
    """A whole answer of `api` whose text is `content`, with `extra` top-level members."""
    reply = fake_apis.steps(api).text(content)({})
    return orjson.dumps({**orjson.loads(reply.body), **extra})


def _raw(body: bytes) -> Any:
    return lambda request: Reply(body=body, headers={"content-type": "application/json"})


async def test_an_answer_past_the_cap_is_refused_unread(
    chat: ChatClient, fake: FakeModel, api: str
) -> None:
    fake.reset(repeat=_raw(_answer(api, "x" * HUGE)))
    for stream in (False, True):
        response = await chat.chat(stream=stream)
        expected = "answer is larger than 8388608 bytes (MODEL_ANSWER_MAX_BYTES)"
        assert expected in response.text, response.text[:500]
        if not stream:
            assert response.status_code == 502


async def test_a_large_answer_is_parsed_off_the_loop(
    chat: ChatClient, fake: FakeModel, api: str
) -> None:
    """3 MB of text, and 7.5 MB whose bulk is 2.5 million empty objects in a member nobody reads
    (what a hostile endpoint sends: parsed on the loop it held it about 0.5 s)."""
    fake.reset(_raw(_answer(api, "y" * LARGE)))
    response = await chat.chat()
    assert response.status_code == 200, response.text[:300]
    assert response.json()["message"]["content"] == "y" * LARGE
    fake.reset(_raw(_answer(api, "small", padding=[{}] * 2_500_000)))
    async with LagProbe() as probe:
        response = await chat.chat()
    assert response.status_code == 200, response.text[:300]
    assert response.json()["message"]["content"] == "small"
    assert probe.worst < BOUND_S, probe.worst  # the watchdog's bound, measured here too


async def test_a_large_malformed_answer_is_a_502(chat: ChatClient, fake: FakeModel) -> None:
    fake.reset(_raw(b'{"choices": [' + b"1," * 1_000_000 + b"1]}"))
    response = await chat.chat()
    assert response.status_code == 502
    assert "malformed answer" in response.json()["detail"]


@pytest.mark.parametrize("api", ["responses"])
async def test_reasoning_read_off_the_loop_goes_back_with_the_next_turn(
    chat: ChatClient, fake: FakeModel
) -> None:
    """A Responses turn read in the worker keeps its reasoning items for the next request, as
    a turn read on the loop does."""
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    reasoning["encrypted_content"] = "e" * 400_000
    steps = fake_apis.steps("responses")
    first = orjson.loads(steps.tool_calls(("add", {"a": 1, "b": 2}))({}).body)
    first["output"].insert(0, reasoning)
    fake.reset(_raw(orjson.dumps(first)), steps.text("3"))
    response = await chat.chat()
    assert response.status_code == 200, response.text[:300]
    assert response.json()["message"]["content"] == "3"
    assert reasoning in fake.requests[1]["input"]


async def test_a_redirecting_model_endpoint_is_said_to_redirect(
    chat: ChatClient, fake: FakeModel
) -> None:
    location = "https://elsewhere.example/v1/chat/completions?api_key=sk-in-the-query"
    fake.reset(repeat=lambda request: Reply(status=307, headers={"location": location}))
    for stream in (False, True):
        response = await chat.chat(stream=stream)
        assert (
            "redirected (HTTP 307) to https://elsewhere.example/v1/chat/completions; "
            "redirects are not followed"
        ) in response.text, response.text
        assert "malformed" not in response.text and "sk-in-the-query" not in response.text
