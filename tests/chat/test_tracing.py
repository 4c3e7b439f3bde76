"""Traces: one chat through the model and an external tool, exported to a real OTLP receiver.

The receiver (tests/support/otlp.py) is a real OTLP/HTTP endpoint on 127.0.0.1 decoding the
exporter's protobuf; the tool's upstream and the model are real HTTP servers too, so the
`traceparent` each receives is the one on the wire.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.observe import telemetry
from tests.support import fake_model as script
from tests.support import functions
from tests.support.apps import create_tenant, http_client, make_settings, running_app
from tests.support.chat_clients import ChatClient
from tests.support.documents import external
from tests.support.echoes import leaks
from tests.support.fake_model import FakeModel
from tests.support.logs import JsonLines
from tests.support.otlp import OtlpReceiver, grpc_receiver
from tests.support.servers import ThreadedServer
from tests.support.upstream import RECEIVED

CONTEXT_VALUE = "zq7/ctx+val=ue&x y\"z<w é'(c)!"
SECRET_VALUE = "zq8/sec+ret=va&l u\"e<s é'(s)!"
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_PARENT = "00f067aa0ba902b7"
SERVER, CLIENT, INTERNAL = 2, 3, 1


@pytest.fixture
def receiver() -> Iterator[tuple[OtlpReceiver, ThreadedServer]]:
    found = OtlpReceiver()
    server = ThreadedServer(found).start()
    yield found, server
    server.stop()


def _settings(fake_url: str, **overrides: Any) -> Any:
    return make_settings(
        None,
        openai_base_url=f"{fake_url}/v1",
        openai_api_key="sk-test-key",
        model_timeout_s=5.0,
        outbound_allow=["127.0.0.1"],
        **overrides,
    )


@asynccontextmanager
async def _traced(
    model: tuple[FakeModel, ThreadedServer], exporter: SpanExporter
) -> AsyncIterator[ChatClient]:
    """A tenant on an app whose spans go to `exporter`."""
    settings = _settings(model[1].url)
    async with (
        running_app(settings, functions.registry, span_exporter=exporter) as app,
        http_client(app) as http,
    ):
        yield ChatClient(app, http, await create_tenant(http, "acme"))


async def _chat_with_traceparent(chat: ChatClient, traceparent: str) -> None:
    response = await chat.http.post(
        "/chat",
        json={"messages": [{"role": "user", "content": "hello"}]},
        headers={**chat.tenant.headers, "traceparent": traceparent},
    )
    assert response.status_code == 200, response.text


async def _hidden_tool(chat: ChatClient, upstream: ThreadedServer) -> None:
    """An external tool that sends a context value and a secret to an echoing upstream."""
    put = await chat.http.put(
        "/secrets/api_key", json={"value": SECRET_VALUE}, headers=chat.tenant.headers
    )
    assert put.status_code in (200, 201), put.text
    hidden = [{"name": "user_id"}, {"name": "api_key", "secret": "api_key"}]
    await chat.add_tool(external("echo", f"{upstream.url}/echo", context_parameters=hidden))
    # Echoes every value in every encoding (tests/support/echoes.py) into the recorded result.
    reflect = external(
        "reflect", f"{upstream.url}/reflect/200", properties={"q": {"type": "string"}}
    )
    await chat.add_tool({**reflect, "context_parameters": hidden})


async def test_a_chat_with_an_external_tool_is_one_trace_in_the_receiver(
    receiver: tuple[OtlpReceiver, ThreadedServer],
    fake_model_server: tuple[FakeModel, ThreadedServer],
    fake: FakeModel,
    upstream: ThreadedServer,
    json_logs: JsonLines,
) -> None:
    found = receiver[0]
    settings = _settings(
        fake_model_server[1].url,
        otel_exporter_otlp_endpoint=receiver[1].url,
        otel_instrumentation_genai_capture_message_content=True,
    )
    RECEIVED.clear()
    async with running_app(settings, functions.registry) as app, http_client(app) as http:
        chat = ChatClient(app, http, await create_tenant(http, "acme"))
        await _hidden_tool(chat, upstream)
        calls = script.tool_calls(("echo", {"city": "Paris"}), ("reflect", {"q": "x"}))
        fake.reset(calls, script.text("It is sunny."))
        caller = f"00-{CALLER_TRACE}-{CALLER_PARENT}-01"
        response = await http.post(
            "/chat",
            json={
                "messages": [{"role": "user", "content": "weather?"}],
                "context_arguments": {"user_id": CONTEXT_VALUE},
            },
            headers={**chat.tenant.headers, "traceparent": caller, "tracestate": "vendor=abc"},
        )
        assert response.status_code == 200, response.text
        run_id = response.json()["run_id"]
        model_requests = list(fake.raw_requests)
    # The lifespan's end exported what was still queued.
    assert set(found.paths) == {"/v1/traces"}
    assert found.headers[0]["content-type"] == "application/x-protobuf"
    chat_spans = [s for s in found.spans if s.trace_id == CALLER_TRACE]
    by_name = {span.name: span for span in chat_spans}
    http_span = by_name["POST /chat"]
    assert http_span.kind == SERVER and http_span.parent_span_id == CALLER_PARENT
    assert http_span.attributes["http.response.status_code"] == 200
    assert http_span.attributes["http.route"] == "/chat"
    assert http_span.resource["service.name"] == "toolgate"
    agent = by_name["invoke_agent toolgate"]
    assert agent.parent_span_id == http_span.span_id
    assert agent.attributes["toolgate.run_id"] == run_id  # a trace finds its run record
    assert agent.attributes["gen_ai.usage.input_tokens"] == 20
    assert agent.attributes["toolgate.stop_reason"] == "completed"
    models = [s for s in chat_spans if s.name.startswith("chat ")]
    assert len(models) == 2 and all(s.kind == CLIENT for s in models)
    assert {s.parent_span_id for s in models} == {agent.span_id}
    assert models[0].attributes["gen_ai.provider.name"] == "openai"
    assert models[0].attributes["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert models[0].attributes["server.address"] == "127.0.0.1"
    tool = by_name["execute_tool echo"]
    assert tool.parent_span_id == agent.span_id and tool.kind == INTERNAL
    assert tool.attributes["gen_ai.tool.call.id"].startswith("call_")
    assert tool.attributes["toolgate.tool.kind"] == "external"
    assert tool.attributes["toolgate.tool.status"] == "ok"
    # W3C trace context on the wire: the upstream's parent is the tool span, the model's its call.
    sent = RECEIVED[-1]["headers"]
    assert isinstance(sent, dict)
    assert sent["traceparent"] == f"00-{CALLER_TRACE}-{tool.span_id}-01"
    assert sent["tracestate"] == "vendor=abc"
    assert f"00-{CALLER_TRACE}-{models[0].span_id}-01".encode() in model_requests[0]
    # The opt-in recorded arguments, results and messages, with the hidden values redacted...
    assert "[redacted]" in tool.attributes["gen_ai.tool.call.result"]
    assert "weather?" in models[0].attributes["gen_ai.input.messages"]
    # ...and no exported byte holds either, in any encoding.
    exported = b"".join(found.raw).decode("utf-8", "replace")
    assert ("user_id", CONTEXT_VALUE) in RECEIVED[-1]["query"]  # type: ignore[operator]
    assert "[redacted]" in by_name["execute_tool reflect"].attributes["gen_ai.tool.call.result"]
    # The oracle decodes every form (CPU): in a thread, off the loop the app shares with the test.
    leaked = await asyncio.to_thread(
        lambda: [v for v in (CONTEXT_VALUE, SECRET_VALUE) if leaks(v, exported)]
    )
    assert leaked == []
    # The request's log lines name the trace.
    lines = [json.loads(line) for line in json_logs.lines if CALLER_TRACE in line]
    assert any(line.get("logger") == "app.access" for line in lines)


async def test_a_missing_or_malformed_caller_context_starts_a_trace_of_its_own(
    fake_model_server: tuple[FakeModel, ThreadedServer], fake: FakeModel
) -> None:
    memory = InMemorySpanExporter()
    zeros = "00-" + "0" * 32 + "-" + "0" * 16 + "-01"  # all-zero ids: invalid
    callers = [{}, {"traceparent": zeros}, {"traceparent": "x" * 5000}, {"tracestate": "a=b"}]
    async with _traced(fake_model_server, memory) as chat:
        http = chat.http
        for headers in callers:
            fake.reset(script.text("hi"))
            response = await http.post(
                "/chat",
                json={"messages": [{"role": "user", "content": "hello"}]},
                headers={**chat.tenant.headers, **headers},
            )
            assert response.status_code == 200, response.text
    served = [s for s in memory.get_finished_spans() if s.name == "POST /chat"]
    assert len(served) == len(callers) and all(s.parent is None for s in served)
    assert len({s.context.trace_id for s in served}) == len(callers)


async def test_tracing_off_builds_no_span_and_sends_no_traceparent(
    chat: ChatClient, fake: FakeModel, upstream: ThreadedServer
) -> None:
    assert not telemetry.tracing_on()
    await chat.add_tool(external("echo", f"{upstream.url}/echo", "GET"))
    fake.reset(script.tool_calls(("echo", {"city": "Paris"})), script.text("ok"))
    await _chat_with_traceparent(chat, f"00-{CALLER_TRACE}-{CALLER_PARENT}-01")
    headers = RECEIVED[-1]["headers"]
    assert isinstance(headers, dict) and "traceparent" not in headers
    assert all(b"traceparent" not in raw for raw in fake.raw_requests)
    assert telemetry.started("x") is telemetry.started("y")  # the one shared no-op


def _tree(spans: list[Any]) -> dict[str, Any]:
    return {span.name: span for span in spans}


async def test_the_in_memory_exporter_sees_invoke_and_mcp_calls(
    fake_model_server: tuple[FakeModel, ThreadedServer],
    fake: FakeModel,
    upstream: ThreadedServer,
) -> None:
    """`POST /tools/{id}/invoke` and a served `/mcp` tools/call: each an `execute_tool` span
    under its request, the MCP one a SERVER span continuing the `_meta` trace context."""
    memory = InMemorySpanExporter()
    async with _traced(fake_model_server, memory) as chat:
        http = chat.http
        await chat.add_tool(external("echo", f"{upstream.url}/echo", "GET"))
        invoked = await http.post(
            "/tools/echo/invoke", json={"arguments": {"city": "Oslo"}}, headers=chat.tenant.headers
        )
        assert invoked.status_code == 200, invoked.text
        meta = {"traceparent": f"00-{CALLER_TRACE}-{CALLER_PARENT}-01"}
        call = {"name": "echo", "arguments": {"city": "Rome"}, "_meta": meta}
        called = await http.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": call},
            headers={
                **chat.tenant.headers,
                "Accept": "application/json, text/event-stream",
                "MCP-Protocol-Version": "2025-06-18",
            },
        )
        assert called.status_code == 200, called.text
    spans = memory.get_finished_spans()
    invoke_http = next(s for s in spans if s.name == "POST /tools/{tool_id}/invoke")
    invoke_tool = next(
        s
        for s in spans
        if s.name == "execute_tool echo" and s.parent.span_id == invoke_http.context.span_id
    )
    assert invoke_http.attributes["toolgate.run_id"]  # the run's id, on the request's span
    assert invoke_tool.attributes["toolgate.tool.status"] == "ok"
    served = next(s for s in spans if s.name == "tools/call echo")
    assert served.kind.name == "SERVER"
    assert format(served.context.trace_id, "032x") == CALLER_TRACE  # from `_meta`
    assert format(served.parent.span_id, "016x") == CALLER_PARENT
    assert served.attributes["mcp.method.name"] == "tools/call"
    mcp_tool = next(
        s
        for s in spans
        if s.name == "execute_tool echo" and s.parent.span_id == served.context.span_id
    )
    assert served.attributes["toolgate.run_id"]  # the MCP run's id
    assert [s.name for s in spans].count("POST /mcp") == 1
    assert "gen_ai.tool.call.arguments" not in mcp_tool.attributes  # contents: opt-in only


async def test_a_failing_tool_and_an_unknown_one_are_error_spans(
    fake_model_server: tuple[FakeModel, ThreadedServer], fake: FakeModel, upstream: ThreadedServer
) -> None:
    memory = InMemorySpanExporter()
    async with _traced(fake_model_server, memory) as chat:
        await chat.add_tool(external("broken", f"{upstream.url}/status/500", "GET"))
        fake.reset(
            script.tool_calls(("broken", {"city": "x"}), ("nosuch", {})), script.text("sorry")
        )
        response = await chat.chat()
        assert response.status_code == 200, response.text
    spans = _tree(memory.get_finished_spans())
    broken, unknown = spans["execute_tool broken"], spans["execute_tool nosuch"]
    assert broken.status.status_code.name == "ERROR"
    assert broken.attributes["error.type"] == "upstream_status", broken.attributes
    assert unknown.attributes["error.type"] == "unknown_tool"
    assert unknown.attributes["toolgate.tool.kind"] == "unknown"


async def test_a_failed_export_is_counted_and_logged(
    fake_model_server: tuple[FakeModel, ThreadedServer], fake: FakeModel, caplog: Any
) -> None:
    """Nothing lost silently: a receiver that refuses every batch is an ERROR and a metric."""
    from opentelemetry.sdk.trace.export import SpanExportResult

    class Refusing(InMemorySpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.FAILURE

    caplog.set_level(logging.ERROR, logger="app.observe.telemetry")
    async with _traced(fake_model_server, Refusing()) as chat:
        metrics = chat.app.state.metrics
    assert metrics.spans_dropped._value.get() >= 1
    assert any("could not be exported" in r.getMessage() for r in caplog.records)


async def test_the_grpc_exporter_when_asked(
    fake_model_server: tuple[FakeModel, ThreadedServer], fake: FakeModel
) -> None:
    """OTEL_EXPORTER_OTLP_PROTOCOL=grpc (the `otlp-grpc` extra) exports to a gRPC receiver."""
    found = OtlpReceiver()
    with grpc_receiver(found) as endpoint:
        settings = _settings(
            fake_model_server[1].url,
            otel_exporter_otlp_endpoint=endpoint,
            otel_exporter_otlp_protocol="grpc",
        )
        async with running_app(settings, functions.registry) as app, http_client(app) as http:
            chat = ChatClient(app, http, await create_tenant(http, "acme"))
            fake.reset(script.text("hi"))
            assert (await chat.chat()).status_code == 200
    names = {span.name for span in found.spans}
    assert {"POST /chat", "invoke_agent toolgate", "chat gpt-4o-mini"} <= names


def test_tracing_is_on_only_with_an_endpoint_and_nothing_saying_off() -> None:
    on = {"otel_exporter_otlp_endpoint": "http://127.0.0.1:4318"}
    assert make_settings(None, **on).tracing
    assert make_settings(None, otel_exporter_otlp_traces_endpoint="https://x/v1/traces").tracing
    assert not make_settings(None).tracing
    assert not make_settings(None, otel_exporter_otlp_endpoint="").tracing  # empty: unset
    assert not make_settings(None, **on, otel_sdk_disabled=True).tracing
    assert not make_settings(None, **on, otel_traces_exporter="none").tracing
    for bad in (
        {"otel_exporter_otlp_endpoint": "localhost:4318"},
        {"otel_exporter_otlp_protocol": "http/json"},
        {"otel_traces_sampler": "sometimes"},
        {"otel_traces_sampler_arg": 2},
    ):
        with pytest.raises(ValueError):
            make_settings(None, **bad)


async def test_a_trace_the_sampler_drops_builds_no_span_below_the_request(
    fake_model_server: tuple[FakeModel, ThreadedServer], fake: FakeModel
) -> None:
    """A caller's unsampled `traceparent` (parentbased sampler): nothing is exported, and the
    model still gets the trace's context (its flags say not sampled)."""
    memory = InMemorySpanExporter()
    async with _traced(fake_model_server, memory) as chat:
        fake.reset(script.text("hi"))
        await _chat_with_traceparent(chat, f"00-{CALLER_TRACE}-{CALLER_PARENT}-00")
        sent = fake.raw_requests[-1].decode()
    assert [s for s in memory.get_finished_spans() if s.name == "POST /chat"] == []
    assert f"00-{CALLER_TRACE}-" in sent and "-00'" in sent
