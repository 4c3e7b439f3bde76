"""The same chats on each model API (chat completions, Responses, Anthropic Messages): the same
answers, run records, streamed events and caller-facing errors, and each API's own wire shape."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from tests.support import fake_apis, functions
from tests.support.apps import create_tenant, http_client, make_settings, running_app
from tests.support.chat_clients import ChatClient
from tests.support.fake_model import FakeModel
from tests.support.servers import ThreadedServer
from tests.support.waiting import runs_recorded


@pytest.fixture(params=fake_apis.APIS)
def api(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def chat(
    request: pytest.FixtureRequest,
    api: str,
    fake_model_server: tuple[FakeModel, ThreadedServer],
    fake: FakeModel,
) -> AsyncIterator[ChatClient]:
    marker = request.node.get_closest_marker("settings")
    settings = make_settings(
        None,
        openai_base_url=f"{fake_model_server[1].url}/v1",
        openai_api_key="sk-test-key",
        model_api=api,
        model_timeout_s=5.0,
        model_max_retries=0,
        **(marker.kwargs if marker else {}),
    )
    async with running_app(settings, functions.registry) as app, http_client(app) as http:
        yield ChatClient(app, http, await create_tenant(http, "acme"))


def shape(body: dict[str, Any]) -> dict[str, Any]:
    """What must be the same on every API: the answer and each call without ids and timings."""
    return {
        "message": body["message"],
        "stop_reason": body["stop_reason"],
        "iterations": body["iterations"],
        "usage": body["usage"],
        "tool_calls": [
            (c["name"], c["arguments"], c["status"], c["error"]) for c in body["tool_calls"]
        ],
        "roles": [m["role"] for m in body["messages"]],
        "finish_reason": body["finish_reason"],
    }


def sent_tool_results(api: str, request: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(call id, content, is an error) of each tool result the model was sent, in its format."""
    if api == "responses":
        return [
            (i["call_id"], i["output"], False)
            for i in request["input"]
            if i.get("type") == "function_call_output"
        ]
    if api == "anthropic_messages":
        return [
            (b["tool_use_id"], b["content"], bool(b.get("is_error")))
            for m in request["messages"]
            if isinstance(m["content"], list)
            for b in m["content"]
            if b["type"] == "tool_result"
        ]
    return [
        (m["tool_call_id"], m["content"], False) for m in request["messages"] if m["role"] == "tool"
    ]


async def test_one_call(chat: ChatClient, fake: FakeModel, api: str) -> None:
    steps = fake_apis.steps(api)
    fake.reset(steps.tool_calls(("add", {"a": 2, "b": 3})), steps.text("5"))
    response = await chat.chat(
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3?"}]
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert shape(body) == {
        "message": {"role": "assistant", "content": "5"},
        "stop_reason": "completed",
        "iterations": 2,
        "usage": {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30},
        "tool_calls": [("add", {"a": 2, "b": 3}, "ok", None)],
        "roles": ["system", "user", "assistant", "tool", "assistant"],
        "finish_reason": "stop",
    }
    [(call_id, content, failed)] = sent_tool_results(api, fake.requests[1])
    assert call_id == body["tool_calls"][0]["id"] and content == "5" and not failed
    first = fake.requests[0]
    if api == "responses":
        assert first["input"][0] == {"role": "system", "content": "Be brief."}
        assert first["tools"][0]["name"] == "add" and first["tools"][0]["strict"] is False
        call = next(i for i in fake.requests[1]["input"] if i.get("type") == "function_call")
        assert call["call_id"] == call_id and call["name"] == "add"
    elif api == "anthropic_messages":
        assert first["system"] == "Be brief." and first["max_tokens"] == 4096
        assert first["messages"] == [
            {"role": "user", "content": [{"type": "text", "text": "2+3?"}]}
        ]
        assert "input_schema" in first["tools"][0] and first["tool_choice"] == {"type": "auto"}
        use = fake.requests[1]["messages"][1]["content"][0]
        assert use == {"type": "tool_use", "id": call_id, "name": "add", "input": {"a": 2, "b": 3}}


async def test_an_answer_cut_short_says_so(chat: ChatClient, fake: FakeModel, api: str) -> None:
    fake.reset(fake_apis.cut_short(api, "The answer is"))
    body = (await chat.chat()).json()
    assert body["message"]["content"] == "The answer is" and body["stop_reason"] == "completed"
    assert body["finish_reason"] == "length"
    [record] = await runs_recorded(chat.http, chat.tenant.headers, 1)
    assert record["finish_reason"] == "length"


async def test_run_records_are_the_same(chat: ChatClient, fake: FakeModel, api: str) -> None:
    steps = fake_apis.steps(api)
    fake.reset(steps.tool_calls(("add", {"a": 1, "b": 1})), steps.text("2"))
    response = await chat.chat(model="m-1")
    run_id = response.json()["run_id"]
    [record] = await runs_recorded(chat.http, chat.tenant.headers, 1)
    assert record["run_id"] == run_id
    assert record["model"] == "m-1" and record["stop_reason"] == "completed"
    assert record["finish_reason"] == "stop"
    assert record["usage"] == {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30}
    assert [(c["name"], c["tool_id"], c["status"]) for c in record["tool_calls"]] == [
        ("add", "adder", "ok")
    ]
    assert fake.requests[0]["model"] == "m-1"


@pytest.mark.parametrize("parallel", [True, False])
async def test_three_parallel_calls(
    chat: ChatClient, fake: FakeModel, api: str, parallel: bool
) -> None:
    steps = fake_apis.steps(api)
    fake.reset(
        steps.tool_calls(
            ("sleep_async", {"seconds": 0.3}),
            ("add", {"a": 1, "b": 1}),
            ("sleep_async", {"seconds": 0.3}),
        ),
        steps.text("done"),
    )
    body = (await chat.chat(parallel_tool_calls=parallel)).json()
    assert [(c["name"], c["status"]) for c in body["tool_calls"]] == [
        ("sleep_async", "ok"),
        ("add", "ok"),
        ("sleep_async", "ok"),
    ]
    results = sent_tool_results(api, fake.requests[1])
    assert [content for _, content, _ in results] == ["slept", "2", "slept"]
    assert [call_id for call_id, _, _ in results] == [c["id"] for c in body["tool_calls"]]
    (_, first_end), (second_start, _) = sorted(functions.TIMELINE)
    assert (second_start < first_end) is parallel
    first = fake.requests[0]
    if api == "anthropic_messages":
        assert first["tool_choice"].get("disable_parallel_tool_use", False) is not parallel
        assert len(fake.requests[1]["messages"]) == 3  # all three results in one user turn
    else:
        assert first.get("parallel_tool_calls", True) is parallel


async def test_chain_of_four(chat: ChatClient, fake: FakeModel, api: str) -> None:
    steps = fake_apis.steps(api)
    fake.reset(
        steps.tool_calls(("add", {"a": 1, "b": 1})),
        steps.tool_calls(("add", {"a": 2, "b": 2})),
        steps.tool_calls(("add", {"a": 4, "b": 4})),
        steps.tool_calls(("add", {"a": 8, "b": 8})),
        steps.text("16"),
    )
    body = (await chat.chat()).json()
    assert body["iterations"] == 5 and body["message"]["content"] == "16"
    assert [c["arguments"]["a"] for c in body["tool_calls"]] == [1, 2, 4, 8]
    assert body["usage"]["total_tokens"] == 75
    # Stateless: the last call carries the whole conversation, each result with its call.
    results = sent_tool_results(api, fake.requests[4])
    assert [content for _, content, _ in results] == ["2", "4", "8", "16"]
    assert [call_id for call_id, _, _ in results] == [c["id"] for c in body["tool_calls"]]


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [("{not json", "the arguments are not valid JSON"), ({"a": "x", "b": 1}, "'a' must be")],
    ids=["not-json", "schema"],
)
async def test_malformed_arguments(
    chat: ChatClient, fake: FakeModel, api: str, arguments: Any, problem: str
) -> None:
    steps = fake_apis.steps(api)
    fake.reset(steps.tool_calls(("add", arguments)), steps.text("sorry"))
    body = (await chat.chat()).json()
    [call] = body["tool_calls"]
    assert call["status"] == "error" and problem in call["error"]
    assert body["message"]["content"] == "sorry" and body["stop_reason"] == "completed"
    [(_, content, failed)] = sent_tool_results(api, fake.requests[1])
    assert content.startswith("Error: ") and problem in content
    assert failed is (api == "anthropic_messages")  # the one API with an error flag


async def test_max_iterations_ends_with_an_answer(
    chat: ChatClient, fake: FakeModel, api: str
) -> None:
    """The last turn keeps the tools (Anthropic refuses a tool-use history without them) and
    forbids calling one: the model answers, and the chat ends 200 with that answer."""
    fake.reset(repeat=fake_apis.calls_until_told(api, ("add", {"a": 1, "b": 2}), answer="3."))
    response = await chat.chat(max_iterations=3)
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["iterations"], body["stop_reason"]) == (3, "max_iterations")
    assert body["message"] == {"role": "assistant", "content": "3."}
    assert len(body["tool_calls"]) == 2 and len(fake.requests) == 3 and fake.refused == []
    assert all("tools" in request for request in fake.requests)
    assert [fake_apis.tools_forbidden(api, request) for request in fake.requests] == [
        False,
        False,
        True,
    ]
    [record] = await runs_recorded(chat.http, chat.tenant.headers, 1)
    assert (record["stop_reason"], record["finish_reason"]) == ("max_iterations", "stop")


async def test_max_iterations_streamed_ends_with_an_answer(
    chat: ChatClient, fake: FakeModel, api: str
) -> None:
    steps = fake_apis.steps(api)
    fake.reset(
        steps.streamed_tool_calls(("add", {"a": 1, "b": 2})),
        steps.streamed_text("Three", "."),
    )
    response = await chat.chat(max_iterations=2, stream=True)
    done = events_of(response.text)[-1]
    assert done[0] == "done" and done[1]["message"]["content"] == "Three."
    assert done[1]["stop_reason"] == "max_iterations" and fake.refused == []
    assert fake_apis.tools_forbidden(api, fake.requests[1])


async def test_a_model_that_calls_tools_on_the_last_turn_gives_no_answer(
    chat: ChatClient, fake: FakeModel, api: str
) -> None:
    """A model (or gateway) that ignores the last turn's `tool_choice`: its calls are not run,
    and the empty answer is a stop reason of its own, not a blank `max_iterations`."""
    steps = fake_apis.steps(api)
    fake.reset(repeat=steps.tool_calls(("add", {"a": 1, "b": 2})))
    response = await chat.chat(max_iterations=2)
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["stop_reason"], body["finish_reason"]) == ("no_answer", "tool_calls")
    assert body["message"] == {"role": "assistant", "content": ""}
    assert len(body["tool_calls"]) == 1 and fake.refused == []
    [record] = await runs_recorded(chat.http, chat.tenant.headers, 1)
    assert record["stop_reason"] == "no_answer"


async def test_an_empty_answer_is_no_answer(chat: ChatClient, fake: FakeModel, api: str) -> None:
    fake.reset(fake_apis.steps(api).text(""))
    body = (await chat.chat()).json()
    assert (body["stop_reason"], body["message"]["content"]) == ("no_answer", "")


# Ids other models and gateways give tool calls: Kimi's `functions.NAME:N`, a Responses item
# id of 53 characters, a UUID with dots.
FOREIGN_IDS = [
    "functions.calculate:0",
    "fc_0f0e50a1476a6c35006912c58dc9f8819192c25864eb16f07f",
    "call.9f1c/2",
]


async def test_history_call_ids_are_sent_in_each_apis_alphabet(
    chat: ChatClient, fake: FakeModel, api: str
) -> None:
    """Ids from a conversation's history reach the API in its alphabet (Anthropic:
    `[a-zA-Z0-9_-]`; chat completions: at most 40 characters), each call still matched to its
    result, and the caller gets its own ids back."""
    calls = [
        {"id": call_id, "type": "function", "function": {"name": "add", "arguments": "{}"}}
        for call_id in FOREIGN_IDS
    ]
    history = [
        {"role": "user", "content": "add things"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        *(
            {"role": "tool", "tool_call_id": c, "content": str(n)}
            for n, c in enumerate(FOREIGN_IDS)
        ),
        {"role": "user", "content": "and now?"},
    ]
    steps = fake_apis.steps(api)
    fake.reset(steps.tool_calls(("add", {"a": 1, "b": 1})), steps.text("done"))
    response = await chat.chat(messages=history)
    assert response.status_code == 200, response.text
    assert fake.refused == []
    body = response.json()
    assert [c["id"] for c in body["messages"][1]["tool_calls"]] == FOREIGN_IDS
    assert [m["tool_call_id"] for m in body["messages"][2:5]] == FOREIGN_IDS
    sent = sent_tool_results(api, fake.requests[1])
    assert len({call_id for call_id, _, _ in sent}) == 4  # still four distinct calls
    assert [content for _, content, _ in sent][:3] == ["0", "1", "2"]
    assert sent[3][0] == body["tool_calls"][0]["id"]  # the model's own id, unchanged


ERRORS = [
    pytest.param(429, {"Retry-After": "7"}, 503, "rate limiting", id="rate-limited"),
    pytest.param(529, {"Retry-After": "3"}, 503, "overloaded", id="overloaded"),
    pytest.param(503, {"Retry-After": "2"}, 503, "overloaded", id="unavailable"),
    pytest.param(401, {}, 502, "credentials", id="credentials"),
    pytest.param(400, {}, 502, "HTTP 400: fake error 400", id="bad-request"),
]


@pytest.mark.parametrize(("code", "headers", "answer", "says"), ERRORS)
async def test_model_errors(
    chat: ChatClient,
    fake: FakeModel,
    api: str,
    code: int,
    headers: dict[str, str],
    answer: int,
    says: str,
) -> None:
    fake.reset(fake_apis.error(api, code, headers=headers))
    response = await chat.chat()
    assert response.status_code == answer, response.text
    assert says in response.json()["detail"] and "sk-test-key" not in response.text
    assert response.headers.get("retry-after") == headers.get("Retry-After")
    [record] = await runs_recorded(chat.http, chat.tenant.headers, 1)
    assert record["stop_reason"] == "error" and says in record["error"]


@pytest.mark.parametrize("body", [b"not json", b'{"unexpected": true}', b"[]"])
async def test_malformed_answers_are_502(
    chat: ChatClient, fake: FakeModel, api: str, body: bytes
) -> None:
    from tests.support import fake_model

    fake.reset(fake_model.raw(body))
    response = await chat.chat()
    assert response.status_code == 502 and response.json()["title"] == "Bad Gateway"


def events_of(text: str) -> list[tuple[str, Any]]:
    found, name = [], ""
    for line in text.splitlines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            found.append((name, orjson.loads(line[6:])))
    return found


async def test_streaming(chat: ChatClient, fake: FakeModel, api: str) -> None:
    steps = fake_apis.steps(api)
    fake.reset(
        steps.streamed_tool_calls(("add", {"a": 20, "b": 22}), ("add", {"a": 1, "b": 2})),
        steps.streamed_text("The ", "answer ", "is 42."),
    )
    response = await chat.chat(stream=True)
    assert response.status_code == 200
    events = events_of(response.text)
    names = [name for name, _ in events]
    # The two calls run in parallel: their events may interleave.
    assert names[0] == "iteration" and names[5:] == ["iteration", *["message.delta"] * 3, "done"]
    assert sorted(names[1:5]) == ["tool_call", "tool_call", "tool_result", "tool_result"]
    assert [d["content"] for n, d in events if n == "message.delta"] == [
        "The ",
        "answer ",
        "is 42.",
    ]
    calls = [d for n, d in events if n == "tool_call"]
    assert [c["arguments"] for c in calls] == [{"a": 20, "b": 22}, {"a": 1, "b": 2}]
    done = events[-1][1]
    assert done["message"] == {"role": "assistant", "content": "The answer is 42."}
    assert done["finish_reason"] == ("stop" if api != "chat_completions" else None)
    assert done["usage"] == {"prompt_tokens": 14, "completion_tokens": 6, "total_tokens": 20}
    assert fake.requests[0]["stream"] is True
    results = sent_tool_results(api, fake.requests[1])
    assert [content for _, content, _ in results] == ["42", "3"]


async def test_streamed_error_event(chat: ChatClient, fake: FakeModel, api: str) -> None:
    from tests.support.fake_model import Reply

    if api == "anthropic_messages":
        event = (
            b'event: error\ndata: {"type": "error", '
            b'"error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n'
        )
        says = "overloaded"
    elif api == "responses":
        event = (
            b'event: error\ndata: {"type": "error", "code": "server_error", "message": "boom"}\n\n'
        )
        says = "boom"
    else:
        event = b'data: {"error": {"message": "boom"}}\n\n'
        says = "boom"
    fake.reset(lambda request: Reply(headers={"content-type": "text/event-stream"}, chunks=[event]))
    response = await chat.chat(stream=True)
    [(name, data)] = [e for e in events_of(response.text) if e[0] not in ("iteration",)]
    assert name == "error" and says in data["detail"]


async def test_the_demo_fake_model_speaks_each_api(api: str) -> None:
    """`python -m app fake-model` (demos, compose, the benchmark) answers on every API."""
    from app.chat.fake_model import FakeModelApp
    from app.tools.builtin import registry

    server = ThreadedServer(
        FakeModelApp(tool="roll_dice", arguments='{"d": 6}', calls=2, latency_s=0)
    )
    server.start()
    settings = make_settings(
        None, openai_base_url=f"{server.url}/v1", openai_api_key="k", model_api=api
    )
    try:
        async with running_app(settings, registry) as app, http_client(app) as http:
            tenant = await create_tenant(http, "acme")
            response = await http.post(
                "/chat",
                json={"messages": [{"role": "user", "content": "roll"}], "tool_ids": ["rolldice"]},
                headers=tenant.headers,
            )
    finally:
        server.stop()
    body = response.json()
    assert response.status_code == 200 and body["iterations"] == 2, response.text
    assert [c["status"] for c in body["tool_calls"]] == ["ok", "ok"]
    rolled = [m["content"] for m in body["messages"] if m["role"] == "tool"]
    assert body["message"]["content"] == f"Tool results: {', '.join(rolled)}"


async def test_responses_chain_sends_only_what_is_new(
    fake_model_server: tuple[FakeModel, ThreadedServer], fake: FakeModel
) -> None:
    """MODEL_RESPONSES_CHAIN: after tool calls, previous_response_id and the results only."""
    settings = make_settings(
        None,
        openai_base_url=f"{fake_model_server[1].url}/v1",
        openai_api_key="k",
        model_api="responses",
        model_responses_chain=True,
    )
    steps = fake_apis.steps("responses")
    fake.reset(steps.tool_calls(("add", {"a": 1, "b": 2})), steps.text("3"))
    async with running_app(settings, functions.registry) as app, http_client(app) as http:
        tenant = await create_tenant(http, "acme")
        response = await http.post(
            "/chat", json={"messages": [{"role": "user", "content": "1+2"}]}, headers=tenant.headers
        )
    body = response.json()
    assert body["message"]["content"] == "3"
    first, second = fake.requests
    assert "previous_response_id" not in first and len(first["input"]) == 1
    assert second["previous_response_id"].startswith("resp_")
    [item] = second["input"]
    assert item == {
        "type": "function_call_output",
        "call_id": body["tool_calls"][0]["id"],
        "output": "3",
    }


async def test_reasoning_items_go_back_before_their_calls(
    fake_model_server: tuple[FakeModel, ThreadedServer], fake: FakeModel
) -> None:
    """Stateless Responses: a turn's reasoning item is sent back ahead of its function call."""
    from tests.support.fake_model import Reply

    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"}

    def with_reasoning(request: dict[str, Any]) -> Reply:
        answer = orjson.loads(
            fake_apis.responses_tool_calls(("add", {"a": 1, "b": 1}))(request).body
        )
        answer["output"].insert(0, reasoning)
        return Reply(body=orjson.dumps(answer), headers={"content-type": "application/json"})

    settings = make_settings(
        None,
        openai_base_url=f"{fake_model_server[1].url}/v1",
        openai_api_key="k",
        model_api="responses",
    )
    fake.reset(with_reasoning, fake_apis.responses_text("2"))
    async with running_app(settings, functions.registry) as app, http_client(app) as http:
        tenant = await create_tenant(http, "acme")
        await http.post(
            "/chat", json={"messages": [{"role": "user", "content": "1+1"}]}, headers=tenant.headers
        )
    kinds = [item.get("type", "message") for item in fake.requests[1]["input"]]
    assert kinds == ["message", "reasoning", "function_call", "function_call_output"]
    assert fake.requests[1]["input"][1] == reasoning


def _sent_tool_schema(api: str, request: dict[str, Any], name: str) -> dict[str, Any]:
    for tool in request["tools"]:
        if api == "chat_completions" and tool["function"]["name"] == name:
            return dict(tool["function"]["parameters"])
        if api == "responses" and tool["name"] == name:
            return dict(tool["parameters"])
        if api == "anthropic_messages" and tool["name"] == name:
            return dict(tool["input_schema"])
    raise AssertionError(f"{name} was not offered")


async def test_context_parameters_on_every_api(chat: ChatClient, fake: FakeModel, api: str) -> None:
    """The model never sees a context parameter, and the server's value wins over the model's."""
    steps = fake_apis.steps(api)
    asked = ("get_profile", {"field": "email", "user_id": "mallory"})
    fake.reset(steps.tool_calls(asked), steps.text("ok"))
    before = len(functions.RECEIVED)
    response = await chat.chat(
        tool_ids=["profile"], context_arguments={"user_id": "alice", "api_token": "t0k-ctx-value"}
    )
    assert response.status_code == 200, response.text
    schema = _sent_tool_schema(api, fake.requests[0], "get_profile")
    assert set(schema["properties"]) == {"field"}, schema
    assert functions.RECEIVED[before:] == [
        {"user_id": "alice", "api_token": "t0k-ctx-value", "field": "email"}
    ]
    assert b"t0k-ctx-value" not in orjson.dumps(fake.requests)
    [record] = await runs_recorded(chat.http, chat.tenant.headers, 1)
    assert b"t0k-ctx-value" not in orjson.dumps(record)


async def test_reasoning_is_found_only_by_its_own_conversation(
    fake_model_server: tuple[FakeModel, ThreadedServer], fake: FakeModel
) -> None:
    """A server that numbers its calls (`call_0` in every answer) behind the operator's endpoint,
    which every tenant shares: one conversation's reasoning items never reach another's request,
    another tenant's or the same tenant's (a conversation the same to the byte, calls included,
    would find them: what the model made of that very conversation)."""
    from tests.support.fake_model import Reply

    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [{"text": "acme's plan"}]}

    def numbered(*, with_reasoning: bool) -> Any:
        def step(request: dict[str, Any]) -> Reply:
            answer = orjson.loads(
                fake_apis.responses_tool_calls(("add", {"a": 1, "b": 1}))(request).body
            )
            answer["output"][0]["call_id"] = "call_0"
            if with_reasoning:
                answer["output"].insert(0, reasoning)
            return Reply(body=orjson.dumps(answer), headers={"content-type": "application/json"})

        return step

    settings = make_settings(
        None,
        openai_base_url=f"{fake_model_server[1].url}/v1",
        openai_api_key="k",
        model_api="responses",
    )
    async with running_app(settings, functions.registry) as app, http_client(app) as http:
        acme, globex = await create_tenant(http, "acme"), await create_tenant(http, "globex")
        fake.reset(numbered(with_reasoning=True), fake_apis.responses_text("2"))
        first = {"messages": [{"role": "user", "content": "1+1"}]}
        assert (await http.post("/chat", json=first, headers=acme.headers)).status_code == 200
        assert fake.requests[1]["input"][1] == reasoning  # its own conversation finds it
        for tenant, text in ((globex, "one and one"), (acme, "again: 1+1")):
            fake.reset(numbered(with_reasoning=False), fake_apis.responses_text("2"))
            other = {"messages": [{"role": "user", "content": text}]}
            assert (await http.post("/chat", json=other, headers=tenant.headers)).status_code == 200
            kinds = [item.get("type", "message") for item in fake.requests[1]["input"]]
            assert kinds == ["message", "function_call", "function_call_output"]
