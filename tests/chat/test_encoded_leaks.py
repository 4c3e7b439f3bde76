"""Hidden values never leave in an encoded form. The local upstream echoes each value raw,
percent-encoded, JSON- and HTML-escaped, as a decoded Basic credential, a header as a Latin-1
server reads it (`é` as `Ã©`), and each in every form of tests/support/echoes.py (Go and .NET
JSON, HTML numeric entities, encodeURIComponent, base64 at an offset and MIME, hex, `\\u` and
`%XX` on everything, `&apos;`, double percent-encoding, JSON inside a JSON string, Latin-1 and
windows-1252 misreadings). None reaches any sink: model traffic, the /chat answer and stream,
invoke, `/mcp`, `/v1/chat/completions` and `/v1/responses` (whole and streamed, tool steps
shown), logs at DEBUG and run records (messages kept). The exported spans:
tests/chat/test_tracing.py."""

from __future__ import annotations

import asyncio
import base64
import json

import pytest

from tests.support import fake_model as script
from tests.support.chat_clients import ChatClient
from tests.support.documents import external
from tests.support.echoes import leaks
from tests.support.fake_model import FakeModel
from tests.support.logs import JsonLines
from tests.support.servers import ThreadedServer
from tests.support.waiting import runs_recorded

# Each holds / + = & space " < ' ( ) ! é, and a marker no ordinary text has.
CONTEXT_VALUE = "zq1/a+b=c&d e\"f<g é'(h)!"
SECRET_VALUE = "zq2/k+e=y&v a\"l<u é'(e)!"
PASSWORD = "zq3/p+w=d&x y\"z<w é'(p)!"
BASIC = base64.b64encode(f"svc-user:{PASSWORD}".encode()).decode()
MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-06-18",
}


def _leaks(text: str) -> list[str]:
    """The hidden values a reader can get back from `text`, whatever the encoding."""
    return [value for value in (CONTEXT_VALUE, SECRET_VALUE, PASSWORD, BASIC) if leaks(value, text)]


def test_the_oracle_sees_the_values_in_what_the_upstream_echoes() -> None:
    """The check the sinks get: it finds every value in an unredacted echo."""
    page = f"{json.dumps(CONTEXT_VALUE)} {SECRET_VALUE.encode().hex()} {BASIC[3:]}"
    assert _leaks(page) == [CONTEXT_VALUE, SECRET_VALUE, PASSWORD]


async def _reflecting_tool(chat: ChatClient, upstream: ThreadedServer, code: int) -> None:
    for name, value in (("basic", BASIC), ("api_key", SECRET_VALUE)):
        put = await chat.http.put(
            f"/secrets/{name}", json={"value": value}, headers=chat.tenant.headers
        )
        assert put.status_code in (200, 201), put.text
    tool = external(
        "reflect",
        f"{upstream.url}/reflect/{code}",
        "GET",
        properties={"q": {"type": "string"}},
        context_parameters=[{"name": "user_id"}, {"name": "api_key", "secret": "api_key"}],
    )
    tool["function"]["headers"] = {
        "Authorization": "Basic {secret:basic}",
        "X-Api-Key": "{secret:api_key}",  # echoed as a Latin-1 server reads it (issue 43)
    }
    await chat.add_tool(tool)


async def _invoke_and_mcp(chat: ChatClient) -> dict[str, str]:
    """What invoke and a `/mcp` tools/call (client token bound to the context value) answer."""
    invoked = await chat.http.post(
        "/tools/reflect/invoke",
        json={"arguments": {"q": "x"}, "context_arguments": {"user_id": CONTEXT_VALUE}},
        headers=chat.tenant.headers,
    )
    assert invoked.status_code == 200, invoked.text
    token = await chat.http.post(
        "/client-tokens",
        json={"name": "alice", "context_arguments": {"user_id": CONTEXT_VALUE}},
        headers=chat.tenant.headers,
    )
    assert token.status_code == 201, token.text
    call = {"name": "reflect", "arguments": {"q": "x"}}
    called = await chat.http.post(
        "/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call},
        headers={"Authorization": f"Bearer {token.json()['token']}", **MCP_HEADERS},
    )
    assert called.status_code == 200, called.text
    return {"invoke": invoked.text, "/mcp": called.text}


async def _openai_sinks(chat: ChatClient, fake: FakeModel) -> dict[str, str]:
    """What `/v1/chat/completions` and `/v1/responses` answer, whole and streamed, the tool
    steps shown (`toolgate.steps`: the scrubbed tool results are in the answer too)."""
    options = {"context_arguments": {"user_id": CONTEXT_VALUE}, "steps": True}
    requests = {
        "/v1/chat/completions": {"messages": [{"role": "user", "content": "hello"}]},
        "/v1/responses": {"input": "hello"},
    }
    sinks = {}
    for path, body in requests.items():
        for stream in (False, True):
            if stream:  # answered as a stream, as the API does (the openai SDK reads only that)
                calls = script.streamed_tool_calls(("call_r", "reflect", '{"q": "x"}'))
                fake.reset(calls, script.streamed_text("done"))
            else:
                fake.reset(script.tool_calls(("reflect", {"q": "x"})), script.text("done"))
            sent = {**body, "model": "default", "stream": stream, "toolgate": options}
            response = await chat.http.post(path, json=sent, headers=chat.tenant.headers)
            assert response.status_code == 200, response.text
            assert "[redacted]" in response.text  # the steps are there, scrubbed
            sinks[f"{path}, stream={stream}"] = response.text
    return sinks


@pytest.mark.settings(run_store_messages=True, tool_output_max_chars=100_000)
@pytest.mark.parametrize(
    "code",
    [
        200,
        404,
    ],
)
async def test_echoed_values_are_redacted_in_every_encoding_and_sink(
    chat: ChatClient,
    fake: FakeModel,
    upstream: ThreadedServer,
    json_logs: JsonLines,
    code: int,
) -> None:
    await _reflecting_tool(chat, upstream, code)
    sinks: dict[str, str] = {}
    for stream in (False, True):
        fake.reset(script.tool_calls(("reflect", {"q": "x"})), script.text("done"))
        response = await chat.chat(context_arguments={"user_id": CONTEXT_VALUE}, stream=stream)
        assert response.status_code == 200, response.text
        sinks["stream" if stream else "answer"] = response.text
        sinks[f"model traffic, stream={stream}"] = b"\n".join(fake.raw_requests).decode()
    sinks |= await _invoke_and_mcp(chat)
    sinks |= await _openai_sinks(chat, fake)
    tool_message = json.loads(sinks["answer"])["messages"][2]["content"]
    # The upstream did echo every value, in every form (else this test would prove nothing)...
    assert tool_message.count("[redacted]") >= (6 if code == 404 else 100), tool_message
    runs = await runs_recorded(chat.http, chat.tenant.headers, 8)
    assert {run["kind"] for run in runs} == {"chat", "invoke", "mcp"}
    sinks["run records"] = json.dumps(runs)
    sinks["logs"] = "\n".join(json_logs.lines)
    # The oracle decodes every form of a 100 KB echo (about 1 s of CPU): in a thread, so the
    # app's loop, which is also this test's, is not held by the test's own check.
    leaked = await asyncio.to_thread(lambda: {sink: _leaks(text) for sink, text in sinks.items()})
    assert leaked == {sink: [] for sink in sinks}
