"""`/v1`: bad input, a second tenant, client tokens, model names, approvals, tool steps, a
failing model and a client that leaves, each answered in OpenAI's shape (the SDK clients:
tests/api/test_openai_sdk.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest

from app.main import create_app
from tests.chat.test_model_providers import allow_loopback
from tests.support import fake_model as script
from tests.support import functions
from tests.support.apps import ADMIN, create_tenant, make_settings
from tests.support.chat_clients import ChatClient
from tests.support.documents import external
from tests.support.fake_model import FakeModel
from tests.support.fixtures.chat import chat, model_client
from tests.support.servers import ThreadedServer
from tests.support.waiting import runs_recorded, within

__all__ = ["chat", "model_client"]  # the chat fixtures (tests/support/fixtures/chat.py)
CHAT = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "hello"}]


def _openai_error(response: httpx.Response, status: int, param: str | None = None) -> str:
    """The answer is OpenAI's error object (and only that); its message."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert set(response.json()) == {"error"}
    assert set(error) == {"message", "type", "param", "code"}
    assert error["param"] == param, error
    return str(error["message"])


def _deep(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (CHAT, {"messages": "hello"}, "messages"),
        (CHAT, {"messages": []}, "messages"),
        (CHAT, {"messages": [{"role": "function", "content": "x"}]}, "messages[0].role"),
        (CHAT, {"messages": HELLO, "model": 5}, "model"),
        (CHAT, {"messages": HELLO, "stream": "yes"}, "stream"),
        (CHAT, {"messages": HELLO, "n": 2}, "n"),
        (CHAT, {"messages": HELLO, "tool_choice": "required"}, "tool_choice"),
        (CHAT, {"messages": HELLO, "tool_choice": {"type": "function"}}, "tool_choice"),
        (CHAT, {"messages": HELLO, "surprise": 1}, "surprise"),
        (CHAT, {"messages": HELLO, "toolgate": {"tool_ids": "echo"}}, "toolgate.tool_ids"),
        (CHAT, {"messages": HELLO, "model": "x" * 5000}, "model"),
        (
            CHAT,
            {"messages": [{"role": "user", "content": [{"type": "text", "x": _deep(80)}]}]},
            None,
        ),
        ("/v1/responses", {"input": []}, "input"),
        ("/v1/responses", {"input": 7}, "input"),
        ("/v1/responses", {"input": [{"type": "function_call_output", "output": "x"}]}, None),
        ("/v1/responses", {"input": [{"role": "user", "content": [{"type": "audio"}]}]}, None),
        ("/v1/responses", {"input": "hi", "previous_response_id": "run_1"}, None),
    ],
)
async def test_bad_requests_are_openai_errors(
    chat: ChatClient, path: str, body: dict[str, Any], param: str | None
) -> None:
    response = await chat.http.post(path, json=body, headers=chat.tenant.headers)
    if param is None:  # nested past the bound, or a part or id of the wrong kind
        assert response.status_code == 400, response.text
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}
        return
    _openai_error(response, 400, param)


async def test_not_json_oversized_and_unknown_tools(chat: ChatClient) -> None:
    headers = {**chat.tenant.headers, "content-type": "application/json"}
    bad = await chat.http.post(CHAT, content=b"{not json", headers=headers)
    assert "not valid JSON" in _openai_error(bad, 400)

    async def endless() -> AsyncIterator[bytes]:  # no Content-Length: counted as it streams
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(2048):
            yield b"x" * 1024

    big = await chat.http.post(CHAT, content=endless(), headers=headers)
    _openai_error(big, 413)
    unknown = await chat.http.post(
        CHAT, json={"messages": HELLO, "toolgate": {"tool_ids": ["nope"]}}, headers=headers
    )
    assert unknown.status_code == 422 and unknown.json()["error"]["param"] == "tool_ids"
    # A name /v1 takes but /chat's rules do not (its model names are shorter): a 422, no 500.
    long_name = await chat.http.post(
        CHAT, json={"messages": HELLO, "model": "m" * 256}, headers=headers
    )
    _openai_error(long_name, 422, "model")
    # Long texts are texts, not lists: no item cap on them.
    long_input = {"input": "x" * 5000, "model": "default", "stream": False}
    fake_reply = await chat.http.post("/v1/responses", json=long_input, headers=headers)
    assert fake_reply.status_code != 400, fake_reply.text


async def test_credentials_are_checked_as_on_chat(chat: ChatClient) -> None:
    missing = await chat.http.post(CHAT, json={"messages": HELLO})
    assert missing.json()["error"]["type"] == "authentication_error"
    _openai_error(missing, 401)
    admin = await chat.http.get("/v1/models", headers=ADMIN)
    _openai_error(admin, 403)
    assert admin.json()["error"]["type"] == "permission_error"


async def test_a_client_token_binds_its_context_tools_and_models(
    chat: ChatClient, fake: FakeModel, upstream: ThreadedServer
) -> None:
    await chat.add_tool(
        external("echo", f"{upstream.url}/echo", context_parameters=[{"name": "user_id"}])
    )
    made = await chat.http.post(
        "/client-tokens",
        json={
            "name": "alice",
            "context_arguments": {"user_id": "alice-7"},
            "tool_ids": ["echo"],
            "models": ["gpt-4o-mini"],
        },
        headers=chat.tenant.headers,
    )
    assert made.status_code == 201, made.text
    alice = {"Authorization": f"Bearer {made.json()['token']}"}
    fake.reset(script.tool_calls(("echo", {"city": "Oslo"})), script.text("done"))
    answered = await chat.http.post(CHAT, json={"messages": HELLO}, headers=alice)
    assert answered.status_code == 200, answered.text
    assert [t["function"]["name"] for t in fake.requests[0]["tools"]] == ["echo"]
    assert "[redacted]" in fake.requests[1]["messages"][-1]["content"]  # alice-7, echoed
    models = await chat.http.get("/v1/models", headers=alice)
    assert [m["id"] for m in models.json()["data"]] == ["gpt-4o-mini"]
    other = await chat.http.post(CHAT, json={"messages": HELLO, "model": "gpt-x"}, headers=alice)
    _openai_error(other, 403)
    previous = {"input": "hi", "previous_response_id": "resp_" + "0" * 32}
    refused = await chat.http.post("/v1/responses", json=previous, headers=alice)
    assert "client token" in _openai_error(refused, 403)


@pytest.mark.settings(run_store_messages=True)
async def test_a_second_tenant_cannot_continue_the_first_ones_response(
    chat: ChatClient, fake: FakeModel
) -> None:
    fake.reset(script.text("secret plan"))
    first = await chat.http.post("/v1/responses", json={"input": "hi"}, headers=chat.tenant.headers)
    assert first.status_code == 200, first.text
    await runs_recorded(chat.http, chat.tenant.headers, 1)
    globex = await create_tenant(chat.http, "globex")
    body = {"input": "go on", "previous_response_id": first.json()["id"]}
    stolen = await chat.http.post("/v1/responses", json=body, headers=globex.headers)
    _openai_error(stolen, 404)
    fake.reset(script.text("ok"))
    own = await chat.http.post("/v1/responses", json=body, headers=chat.tenant.headers)
    assert own.status_code == 200, own.text
    assert "secret plan" in str(fake.requests[-1]["messages"])


async def test_without_kept_messages_previous_response_id_says_why(
    chat: ChatClient, fake: FakeModel
) -> None:
    fake.reset(script.text("hi"))
    first = await chat.http.post("/v1/responses", json={"input": "hi"}, headers=chat.tenant.headers)
    await runs_recorded(chat.http, chat.tenant.headers, 1)
    body = {"input": "go on", "previous_response_id": first.json()["id"]}
    later = await chat.http.post("/v1/responses", json=body, headers=chat.tenant.headers)
    assert "RUN_STORE_MESSAGES" in _openai_error(later, 422, "previous_response_id")


async def test_model_names_map_to_the_tenants_providers(
    chat: ChatClient, fake: FakeModel, fake_model_server: tuple[FakeModel, ThreadedServer]
) -> None:
    await allow_loopback(chat.http, "acme")
    headers = chat.tenant.headers
    await chat.http.put("/secrets/model-key", json={"value": "sk-tenant-1"}, headers=headers)
    provider = {
        "api": "chat_completions",
        "base_url": f"{fake_model_server[1].url}/v1",
        "api_key_secret": "model-key",
        "default_model": "m1",
        "allowed_models": ["m2"],
    }
    put = await chat.http.put("/model-providers/local", json=provider, headers=headers)
    assert put.status_code == 201, put.text
    listed = await chat.http.get("/v1/models", headers=headers)
    assert [m["id"] for m in listed.json()["data"]] == ["gpt-4o-mini", "local/m1", "local/m2"]
    one = await chat.http.get("/v1/models/local/m2", headers=headers)
    assert one.json()["owned_by"] == "local"
    _openai_error(await chat.http.get("/v1/models/local/m9", headers=headers), 404)
    for name, sent in (("local/m2", "m2"), ("local", "m1"), ("gpt-4o-mini", "gpt-4o-mini")):
        fake.reset(script.text("hi"))
        answered = await chat.http.post(
            CHAT, json={"messages": HELLO, "model": name}, headers=headers
        )
        assert answered.status_code == 200, answered.text
        assert fake.requests[-1]["model"] == sent and answered.json()["model"] == name
    refused = await chat.http.post(
        CHAT, json={"messages": HELLO, "model": "local/m9"}, headers=headers
    )
    _openai_error(refused, 422, "model")


async def test_a_call_waiting_for_approval_is_shown_in_the_extension(
    chat: ChatClient, fake: FakeModel, upstream: ThreadedServer
) -> None:
    await chat.add_tool(external("wipe", f"{upstream.url}/echo", "DELETE"))
    fake.reset(script.tool_calls(("wipe", {"city": "x"})))
    answered = await chat.http.post(CHAT, json={"messages": HELLO}, headers=chat.tenant.headers)
    assert answered.status_code == 200, answered.text
    shown = answered.json()["toolgate"]
    assert shown["stop_reason"] == "approval_required"
    assert [p["tool"] for p in shown["pending_approvals"]] == ["wipe"]
    # Sent back with a decision, through the same route, the call runs.
    decision = {"call_id": shown["pending_approvals"][0]["id"], "approved": True}
    fake.reset(script.text("wiped"))
    body = {"messages": shown["messages"], "toolgate": {"approvals": [decision]}}
    resumed = await chat.http.post(CHAT, json=body, headers=chat.tenant.headers)
    assert resumed.status_code == 200, resumed.text
    assert resumed.json()["choices"][0]["message"]["content"] == "wiped"


def _chunks(text: str) -> list[dict[str, Any]]:
    lines = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [orjson.loads(line) for line in lines[:-1]]


async def test_tool_steps_stream_only_when_asked(
    chat: ChatClient, fake: FakeModel, upstream: ThreadedServer
) -> None:
    await chat.add_tool(external("echo", f"{upstream.url}/echo"))
    for steps in (False, True):
        call = ("call_1", "echo", '{"city": "Oslo"}')
        fake.reset(script.streamed_tool_calls(call), script.streamed_text("a", "b"))
        body = {"messages": HELLO, "stream": True, "toolgate": {"steps": steps}}
        answered = await chat.http.post(CHAT, json=body, headers=chat.tenant.headers)
        assert answered.status_code == 200, answered.text
        chunks = _chunks(answered.text)
        events = [c["toolgate"]["event"] for c in chunks if "toolgate" in c and not c["choices"]]
        assert events == (["tool_call", "tool_result"] if steps else [])
        assert (
            "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
            == "ab"
        )
        assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


async def test_sampling_fields_are_accepted_and_named_as_not_applied(
    chat: ChatClient, fake: FakeModel
) -> None:
    fake.reset(script.text("hi"))
    body = {"messages": HELLO, "temperature": 0.2, "max_tokens": 50, "user": "u1"}
    answered = await chat.http.post(CHAT, json=body, headers=chat.tenant.headers)
    assert answered.status_code == 200, answered.text
    assert answered.headers["x-toolgate-ignored"] == "temperature,max_tokens"
    assert "temperature" not in fake.requests[-1]


async def test_a_failing_model_is_a_server_error_not_to_retry(
    chat: ChatClient, fake: FakeModel
) -> None:
    fake.reset(repeat=script.status(500))
    failed = await chat.http.post(CHAT, json={"messages": HELLO}, headers=chat.tenant.headers)
    assert failed.headers["x-should-retry"] == "false"
    assert failed.json()["error"]["type"] == "server_error"
    _openai_error(failed, 502)
    fake.reset(repeat=script.status(500))
    body = {"messages": HELLO, "stream": True}
    streamed = await chat.http.post(CHAT, json=body, headers=chat.tenant.headers)
    last = [line for line in streamed.text.splitlines() if line.startswith("data: ")][-1]
    assert orjson.loads(last[6:])["error"]["type"] == "server_error"  # and no [DONE]
    fake.reset(repeat=script.status(500))
    events = await chat.http.post(
        "/v1/responses", json={"input": "hi", "stream": True}, headers=chat.tenant.headers
    )
    assert "event: response.failed" in events.text


async def test_a_client_that_leaves_a_stream_cancels_the_run(
    fake_model_server: tuple[FakeModel, ThreadedServer], fake: FakeModel
) -> None:
    settings = make_settings(
        None, openai_base_url=f"{fake_model_server[1].url}/v1", openai_api_key="sk-test"
    )
    server = ThreadedServer(create_app(settings, registry=functions.registry), lifespan="on")
    server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            made = await http.post("/tenants", json={"tenant_id": "acme"}, headers=ADMIN)
            headers = {"Authorization": f"Bearer {made.json()['api_key']}"}
            slow = orjson.dumps({"seconds": 5}).decode()
            fake.reset(script.tool_calls(("sleep_async", slow)), script.text("late"))
            body = {"messages": HELLO, "stream": True, "toolgate": {"steps": True}}
            async with http.stream("POST", CHAT, json=body, headers=headers) as response:
                async for line in response.aiter_lines():
                    if '"tool_call"' in line:
                        break  # the client goes away while the tool runs
            await within(lambda: bool(functions.CANCELLED), 5)
            assert functions.CANCELLED == ["sleep_async"] and len(fake.requests) == 1
            runs = await runs_recorded(http, headers, 1, "/runs?status=cancelled")
            assert [run["stop_reason"] for run in runs] == ["cancelled"]
    finally:
        server.stop()
