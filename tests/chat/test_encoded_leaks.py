"""Hidden values never leave in an encoded form: percent-encoded (either case, `quote` and
`quote_plus`), JSON-escaped, HTML-escaped or as a decoded Basic credential, through every sink:
model traffic, the answer, the stream, logs at DEBUG and run records (messages kept)."""

from __future__ import annotations

import base64
import html
import json
from urllib.parse import quote, quote_plus

import pytest

from app.hidden import encoded_forms
from tests.support import fake_model as script
from tests.support.chat_clients import ChatClient
from tests.support.documents import external
from tests.support.fake_model import FakeModel
from tests.support.logs import JsonLines
from tests.support.servers import ThreadedServer
from tests.support.waiting import runs_recorded

# Each holds / + = & space " < é, and a marker no ordinary text has.
CONTEXT_VALUE = 'zq1/a+b=c&d e"f<g é'
SECRET_VALUE = 'zq2/k+e=y&v a"l<u é'
PASSWORD = 'zq3/p+w=d&x y"z<w é'
BASIC = base64.b64encode(f"svc-user:{PASSWORD}".encode()).decode()


def _leaks(text: str) -> list[str]:
    """Each hidden value's forms found in `text` (the form, not the value, is reported)."""
    found = []
    for value in (CONTEXT_VALUE, SECRET_VALUE, PASSWORD, BASIC):
        forms = encoded_forms(value) | {value.replace("/", "\\/")}
        found += [form for form in forms if form in text]
    return found


def test_the_forms_searched_include_what_upstreams_echo() -> None:
    forms = encoded_forms(CONTEXT_VALUE)
    assert quote(CONTEXT_VALUE, safe="") in forms and quote_plus(CONTEXT_VALUE) in forms
    assert quote(CONTEXT_VALUE, safe="").lower() in forms  # %2f as well as %2F
    assert json.dumps(CONTEXT_VALUE)[1:-1] in forms  # \" and \u00e9
    assert html.escape(CONTEXT_VALUE) in forms
    assert f"svc-user:{PASSWORD}" in encoded_forms(BASIC)  # the credential, decoded


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
    tool["function"]["headers"] = {"Authorization": "Basic {secret:basic}"}
    await chat.add_tool(tool)


@pytest.mark.settings(run_store_messages=True)
@pytest.mark.parametrize("code", [200, 404])
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
    tool_message = json.loads(sinks["answer"])["messages"][2]["content"]
    # The upstream did echo every value (else this test would prove nothing)...
    assert tool_message.count("[redacted]") >= 6, tool_message
    runs = await runs_recorded(chat.http, chat.tenant.headers, 2)
    sinks["run records"] = json.dumps(runs)
    sinks["logs"] = "\n".join(json_logs.lines)
    leaks = {sink: _leaks(text) for sink, text in sinks.items()}
    assert leaks == {sink: [] for sink in sinks}


@pytest.mark.parametrize("value", ["ª¼¥§Ì§", "\ud800lone-surrogate", "ÿÿÿÿÿÿÿÿ", "a" * 8])
def test_any_text_has_its_forms(value: str) -> None:
    assert value in encoded_forms(value)  # never an exception, whatever a caller sends
