"""The loop's held-out behaviours on scripted model servers written by others (llm-mock-api on
all three APIs, fakellm on chat completions and Anthropic Messages): one call, three parallel
calls, a chain of four, context parameters, malformed arguments, model errors, max iterations
and streaming, each with the same run record."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson
import pytest

from tests.support import functions
from tests.support.apps import create_tenant, http_client, make_settings, running_app
from tests.support.chat_clients import ChatClient
from tests.support.third_party_models import (
    Calls,
    Failure,
    FakeLlm,
    LlmMockApi,
    ScriptedModel,
    Text,
)
from tests.support.waiting import runs_recorded

COMBINATIONS = [
    ("llm-mock-api", "chat_completions"),
    ("llm-mock-api", "responses"),
    ("llm-mock-api", "anthropic_messages"),
    ("fakellm", "chat_completions"),
    ("fakellm", "anthropic_messages"),
]


@pytest.fixture(scope="session")
def llm_mock_api() -> Iterator[LlmMockApi]:
    server = LlmMockApi()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def fakellm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeLlm]:
    server = FakeLlm(tmp_path_factory.mktemp("fakellm") / "fakellm.yaml")
    yield server
    server.stop()


@pytest.fixture(params=COMBINATIONS, ids=["/".join(c) for c in COMBINATIONS])
def model(request: pytest.FixtureRequest) -> tuple[ScriptedModel, str]:
    server_name, api = request.param
    server: ScriptedModel = request.getfixturevalue(server_name.replace("-", "_"))
    assert api in server.apis
    return server, api


@pytest.fixture
async def chat(model: tuple[ScriptedModel, str]) -> AsyncIterator[ChatClient]:
    server, api = model
    settings = make_settings(
        None,
        openai_base_url=server.url,
        openai_api_key="sk-third-party",
        model_api=api,
        model_timeout_s=5.0,
        model_max_retries=0,
        tool_timeout_s=5.0,
    )
    functions.TIMELINE.clear()
    async with running_app(settings, functions.registry) as app, http_client(app) as http:
        yield ChatClient(app, http, await create_tenant(http, "acme"))


def calls_of(body: dict[str, Any]) -> list[tuple[str, Any, str]]:
    return [(c["name"], c["arguments"], c["status"]) for c in body["tool_calls"]]


def check_results_sent(model: tuple[ScriptedModel, str], index: int, body: dict[str, Any]) -> None:
    """The server read the tool results request `index` carried, matched to the calls' ids, in
    order (of each Anthropic turn of results it keeps the last id only)."""
    server, api = model
    read = server.tool_results(index)
    if read is None:
        return
    ids = [c["id"] for c in body["tool_calls"]]
    read_ids = [call_id for call_id, _ in read]
    if api == "anthropic_messages":
        assert read_ids and set(read_ids) <= set(ids) and read_ids[-1] == ids[-1]
    else:
        assert read_ids == ids
        tool_messages = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        assert [content for _, content in read] == tool_messages


async def recorded(chat: ChatClient) -> dict[str, Any]:
    """The chat's run record, as it must read on every API and server (the model's name is
    the operator's default; usage is each server's own count)."""
    [record] = await runs_recorded(chat.http, chat.tenant.headers, 1)
    assert record["usage"]["total_tokens"] >= 0
    return {
        "model": record["model"],
        "provider": record.get("provider"),
        "stop_reason": record["stop_reason"],
        "finish_reason": record.get("finish_reason"),
        "iterations": record["iterations"],
        "tool_calls": [(c["name"], c["tool_id"], c["status"]) for c in record["tool_calls"]],
    }


def completed(iterations: int, *calls: tuple[str, str, str]) -> dict[str, Any]:
    return {
        "model": "gpt-4o-mini",
        "provider": None,
        "stop_reason": "completed",
        "finish_reason": "stop",
        "iterations": iterations,
        "tool_calls": list(calls),
    }


ADD_OK = ("add", "adder", "ok")
SLEEP_OK = ("sleep_async", "sleeper", "ok")


async def test_one_call(chat: ChatClient, model: tuple[ScriptedModel, str]) -> None:
    server, _ = model
    await server.script(Calls([("add", {"a": 2, "b": 3})]), Text("It is 5."))
    response = await chat.chat(messages=[{"role": "user", "content": "What is 2 + 3?"}])
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["message"] == {"role": "assistant", "content": "It is 5."}
    assert (body["stop_reason"], body["iterations"]) == ("completed", 2)
    assert calls_of(body) == [("add", {"a": 2, "b": 3}, "ok")]
    assert body["usage"]["total_tokens"] > 0
    check_results_sent(model, 1, body)
    assert await recorded(chat) == completed(2, ADD_OK)


async def test_context_parameters(chat: ChatClient, model: tuple[ScriptedModel, str]) -> None:
    """The tool gets the server's context values, the model's own `user_id` loses, and neither
    the answer nor the run record shows the hidden token."""
    server, _ = model
    await server.script(
        Calls([("get_profile", {"field": "email", "user_id": "mallory"})]), Text("ok")
    )
    before = len(functions.RECEIVED)
    context = {"user_id": "alice", "api_token": "t0k-third-party"}
    response = await chat.chat(
        messages=[{"role": "user", "content": "my email?"}],
        tool_ids=["profile"],
        context_arguments=context,
    )
    assert response.status_code == 200, response.text
    assert functions.RECEIVED[before:] == [{**context, "field": "email"}]
    assert "t0k-third-party" not in response.text
    record = await recorded(chat)
    assert record == completed(2, ("get_profile", "profile", "ok"))
    [stored] = await runs_recorded(chat.http, chat.tenant.headers, 1)
    assert "t0k-third-party" not in orjson.dumps(stored).decode()


async def test_three_parallel_calls(chat: ChatClient, model: tuple[ScriptedModel, str]) -> None:
    server, _ = model
    sleep = ("sleep_async", {"seconds": 0.3})
    await server.script(Calls([sleep, ("add", {"a": 1, "b": 1}), sleep]), Text("done"))
    body = (await chat.chat(messages=[{"role": "user", "content": "three at once"}])).json()
    assert calls_of(body) == [
        ("sleep_async", {"seconds": 0.3}, "ok"),
        ("add", {"a": 1, "b": 1}, "ok"),
        ("sleep_async", {"seconds": 0.3}, "ok"),
    ]
    assert len({c["id"] for c in body["tool_calls"]}) == 3
    (_, first_end), (second_start, _) = sorted(functions.TIMELINE)
    assert second_start < first_end  # they overlapped
    check_results_sent(model, 1, body)
    assert await recorded(chat) == completed(2, SLEEP_OK, ADD_OK, SLEEP_OK)


async def test_a_chain_of_four(chat: ChatClient, model: tuple[ScriptedModel, str]) -> None:
    server, _ = model
    await server.script(
        *(Calls([("add", {"a": n, "b": n})]) for n in (1, 2, 4, 8)), Text("Sixteen.")
    )
    body = (await chat.chat(messages=[{"role": "user", "content": "double four times"}])).json()
    assert (body["iterations"], body["message"]["content"]) == (5, "Sixteen.")
    assert [c[1]["a"] for c in calls_of(body)] == [1, 2, 4, 8]
    assert [m["content"] for m in body["messages"] if m["role"] == "tool"] == ["2", "4", "8", "16"]
    check_results_sent(model, 4, body)
    assert await recorded(chat) == completed(5, ADD_OK, ADD_OK, ADD_OK, ADD_OK)


async def test_malformed_arguments(chat: ChatClient, model: tuple[ScriptedModel, str]) -> None:
    server, _ = model
    await server.script(Calls([("add", {"a": "two", "c": 1})]), Text("Sorry."))
    body = (await chat.chat(messages=[{"role": "user", "content": "bad args"}])).json()
    [call] = body["tool_calls"]
    assert call["status"] == "error" and "'a' must be an integer" in call["error"]
    assert (body["stop_reason"], body["message"]["content"]) == ("completed", "Sorry.")
    assert await recorded(chat) == completed(2, ("add", "adder", "error"))


@pytest.mark.parametrize(
    ("status", "answer", "says"),
    [(429, 503, "rate limiting"), (500, 502, "HTTP 500"), (401, 502, "credentials")],
)
async def test_a_model_error(
    chat: ChatClient, model: tuple[ScriptedModel, str], status: int, answer: int, says: str
) -> None:
    server, _ = model
    await server.script(Failure(status, "scripted failure"))
    response = await chat.chat(messages=[{"role": "user", "content": f"fail {status}"}])
    assert response.status_code == answer, response.text
    assert says in response.json()["detail"] and "sk-third-party" not in response.text
    [record] = await runs_recorded(chat.http, chat.tenant.headers, 1)
    assert record["stop_reason"] == "error" and says in record["error"]


async def test_max_iterations(chat: ChatClient, model: tuple[ScriptedModel, str]) -> None:
    """The last turn keeps the tools (and allows no call): every server takes it, and its
    answer ends the chat."""
    server, _ = model
    add = Calls([("add", {"a": 1, "b": 2})])
    await server.script(add, add, Text("Enough adding."))
    response = await chat.chat(messages=[{"role": "user", "content": "loop"}], max_iterations=3)
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["stop_reason"], body["iterations"]) == ("max_iterations", 3)
    assert body["message"]["content"] == "Enough adding." and len(body["tool_calls"]) == 2
    assert await recorded(chat) == {**completed(3, ADD_OK, ADD_OK), "stop_reason": "max_iterations"}


async def test_calls_on_the_last_turn(chat: ChatClient, model: tuple[ScriptedModel, str]) -> None:
    """A server that still answers with calls on the last turn: they are not run, and without
    text beside them (fakellm's Anthropic calls come with some) that is no answer, said so."""
    server, _ = model
    await server.script(Calls([("add", {"a": 1, "b": 2})]))
    body = (
        await chat.chat(messages=[{"role": "user", "content": "loop"}], max_iterations=2)
    ).json()
    stop = "max_iterations" if body["message"]["content"] else "no_answer"
    assert (body["stop_reason"], body["iterations"]) == (stop, 2)
    assert await recorded(chat) == {
        **completed(2, ADD_OK),
        "stop_reason": stop,
        "finish_reason": "tool_calls",  # the last turn asked for more
    }


def events_of(text: str) -> list[tuple[str, Any]]:
    found, name = [], ""
    for line in text.splitlines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            found.append((name, orjson.loads(line[6:])))
    return found


@pytest.mark.slow  # 2 s or more in the inner loop
async def test_streaming(chat: ChatClient, model: tuple[ScriptedModel, str]) -> None:
    server, _ = model
    await server.script(
        Calls([("add", {"a": 20, "b": 22}), ("add", {"a": 1, "b": 1})]), Text("The answer is 42.")
    )
    response = await chat.chat(messages=[{"role": "user", "content": "stream it"}], stream=True)
    assert response.status_code == 200
    events = events_of(response.text)
    names = [name for name, _ in events]
    assert names.count("tool_call") == 2 and names.count("tool_result") == 2
    assert names[-1] == "done" and "message.delta" in names
    deltas = "".join(d["content"] for n, d in events if n == "message.delta")
    assert deltas == "The answer is 42."
    assert [d["arguments"] for n, d in events if n == "tool_call"] == [
        {"a": 20, "b": 22},
        {"a": 1, "b": 1},
    ]
    done = events[-1][1]
    assert done["message"]["content"] == "The answer is 42." and done["iterations"] == 2
    assert [c["status"] for c in done["tool_calls"]] == ["ok", "ok"]
    assert await recorded(chat) == completed(2, ADD_OK, ADD_OK)
