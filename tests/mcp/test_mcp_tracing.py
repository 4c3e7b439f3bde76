"""Traces through MCP: a chat's call to a tool of an MCP server over streamable HTTP is an
`execute_tool` span with a `tools/call` CLIENT span under it, and the server receives the
trace's `traceparent` (on the HTTP request; the SDK also puts it in `params._meta`)."""

from __future__ import annotations

import json

import orjson
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support import fake_model as script
from tests.support import functions
from tests.support.apps import create_tenant, http_client, make_settings, running_app
from tests.support.fake_model import FakeModel
from tests.support.mcp_demo import McpDemoServer
from tests.support.servers import ThreadedServer


async def test_an_mcp_tool_call_continues_the_trace_at_the_server(
    fake_model_server: tuple[FakeModel, ThreadedServer], fake: FakeModel, demo_http: McpDemoServer
) -> None:
    servers = {"mcpServers": {"echoer": {"type": "streamable-http", "url": demo_http.url}}}
    settings = make_settings(
        None,
        openai_base_url=f"{fake_model_server[1].url}/v1",
        openai_api_key="sk-test-key",
        outbound_allow=["127.0.0.1"],
        mcp_servers=orjson.dumps(servers).decode(),
        mcp_list_deadline_s=30.0,
    )
    memory = InMemorySpanExporter()
    async with (
        running_app(settings, functions.registry, span_exporter=memory) as app,
        http_client(app) as http,
    ):
        tenant = await create_tenant(http, "acme")
        fake.reset(script.tool_calls(("echoer__echo_headers", {})), script.text("done"))
        body = {"messages": [{"role": "user", "content": "hi"}], "mcp_servers": ["echoer"]}
        response = await http.post("/chat", json=body, headers=tenant.headers)
        assert response.status_code == 200, response.text
        echoed = json.loads(response.json()["messages"][2]["content"])
    spans = {span.name: span for span in memory.get_finished_spans()}
    tool, client = spans["execute_tool echoer__echo_headers"], spans["tools/call echo_headers"]
    assert tool.attributes["toolgate.tool.kind"] == "mcp"
    assert client.kind.name == "CLIENT" and client.parent.span_id == tool.context.span_id
    assert client.attributes["toolgate.mcp.server"] == "echoer"
    trace_id = format(client.context.trace_id, "032x")
    parent, flags = echoed["traceparent"].rsplit("-", 1)
    assert parent == f"00-{trace_id}-{client.context.span_id:016x}"
    assert int(flags, 16) & 1  # sampled
