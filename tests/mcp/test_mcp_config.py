"""The operator's `mcpServers` document: accepted shapes, precise refusals, no echoed secrets."""

from __future__ import annotations

from pathlib import Path

import mcp.types as mcp_types
import orjson
import pytest

from app.main import create_app
from app.mcp.client import call_outcome
from app.mcp.config import (
    McpConfigError,
    exposed_tool_name,
    load_operator_servers,
    parse_operator_servers,
)
from tests.support.apps import make_settings
from tests.support.processes import run_app

CANARY = "canary-secret-7f3a9e"


def test_every_transport_and_the_claude_style_shorthands() -> None:
    servers = parse_operator_servers(
        orjson.dumps(
            {
                "mcpServers": {
                    "time": {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"]},
                    "docs": {"type": "http", "url": "https://docs.example/mcp", "tenants": ["a"]},
                    "feed": {
                        "type": "sse",
                        "url": "https://feed.example/sse",
                        "headers": {"X-K": "v"},
                    },
                    "calc": {
                        "type": "stdio",
                        "command": "calc",
                        "env": {"K": "v"},
                        "context": {"user_id": {"argument": "user"}, "tok": {"header": "X-Tok"}},
                    },
                }
            }
        ).decode()
    )
    assert {n: s.type for n, s in servers.items()} == {
        "time": "stdio",
        "docs": "streamable-http",
        "feed": "sse",
        "calc": "stdio",
    }
    assert servers["docs"].available_to("a") and not servers["docs"].available_to("b")
    assert servers["time"].available_to("anyone")
    assert servers["calc"].argument_mappings() == {"user_id": "user"}
    headers = servers["calc"].request_headers({"tok": "t-1", "user_id": "u"})
    assert headers == {"X-Tok": "t-1"}
    assert servers["feed"].request_headers({}) == {"X-K": "v"}


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ("{not json", "not valid JSON"),
        ('{"mcpServers": {"x": {"type": "stdio"}}}', "needs 'command'"),
        (
            '{"mcpServers": {"x": {"type": "sse", "command": "c", "url": "https://a"}}}',
            "needs 'url'",
        ),
        ('{"mcpServers": {"x": {"args": []}}}', "give a 'type'"),
        ('{"mcpServers": {"x": {"type": "ws", "url": "https://a"}}}', "mcpServers.x.type"),
        ('{"mcpServers": {"a__b": {"command": "c"}}}', "mcpServers.a__b"),
        ('{"mcpServers": {"x": {"url": "ftp://a"}}}', "mcpServers.x.url"),
        (
            '{"mcpServers": {"x": {"url": "https://a", "headers": {"Host": "h"}}}}',
            "set by the transport",
        ),
        ('{"mcpServers": {"x": {"command": "c", "context": {"u": {}}}}}', "exactly one"),
        ('{"servers": {}}', "servers: Extra inputs"),
    ],
)
def test_bad_documents_are_refused_with_the_field_named(document: str, expected: str) -> None:
    with pytest.raises(McpConfigError) as caught:
        parse_operator_servers(document)
    assert expected in str(caught.value)


def test_messages_never_echo_values() -> None:
    document = {
        "mcpServers": {"x": {"url": "https://a", "headers": {"Host": CANARY}, "env": {"K": CANARY}}}
    }
    with pytest.raises(McpConfigError) as caught:
        parse_operator_servers(orjson.dumps(document).decode())
    assert CANARY not in str(caught.value)


def test_file_or_inline_but_not_both(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text('{"mcpServers": {"time": {"command": "mcp-server-time"}}}')
    assert set(load_operator_servers(None, str(path))) == {"time"}
    with pytest.raises(McpConfigError, match="not both"):
        load_operator_servers('{"mcpServers": {}}', str(path))
    with pytest.raises(McpConfigError, match="cannot be read"):
        load_operator_servers(None, str(tmp_path / "missing.json"))


async def test_the_app_refuses_to_start_with_a_bad_document() -> None:
    app = create_app(make_settings(None, mcp_servers='{"mcpServers": {"x": {"type": "stdio"}}}'))
    with pytest.raises(McpConfigError, match="needs 'command'"):
        async with app.router.lifespan_context(app):
            pass


@pytest.mark.processes
@pytest.mark.slow
def test_check_command_lists_the_problems() -> None:
    entry = {"type": "sse", "url": "https://a", "headers": {"Host": CANARY}}
    result = run_app("check", MCP_SERVERS=orjson.dumps({"mcpServers": {"x": entry}}).decode())
    assert result.returncode == 1
    assert "invalid MCP server configuration" in result.stderr
    assert "set by the transport" in result.stderr
    assert CANARY not in result.stderr + result.stdout


@pytest.mark.parametrize(
    ("server", "tool", "expected"),
    [
        ("time", "get_current_time", "time__get_current_time"),
        ("docs", "search.pages/v2", "docs__search_pages_v2"),
    ],
)
def test_exposed_names(server: str, tool: str, expected: str) -> None:
    assert exposed_tool_name(server, tool) == expected


def test_long_names_stay_within_64_characters_and_distinct() -> None:
    a = exposed_tool_name("server", "t" * 80 + "a")
    b = exposed_tool_name("server", "t" * 80 + "b")
    assert len(a) == len(b) == 64 and a != b
    assert a.startswith("server__ttt")


def test_operator_entries_choose_tools_with_include_and_exclude() -> None:
    servers = parse_operator_servers(
        '{"mcpServers": {"docs": {"url": "https://mcp.example.com/mcp",'
        ' "include": ["search", "fetch"], "exclude": ["fetch"]}, "all": {"command": "x"}}}'
    )
    assert servers["docs"].offers("search") and not servers["docs"].offers("fetch")
    assert not servers["docs"].offers("delete")
    assert servers["all"].offers("anything")


def test_structured_content_is_kept_beside_text_unless_it_says_the_same() -> None:
    both = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text="2 results")],
        structured_content={"items": [1, 2]},
    )
    assert call_outcome(both).content == '2 results\n{"items":[1,2]}'
    same = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text='{"items": [1, 2]}')],
        structured_content={"items": [1, 2]},
    )
    assert call_outcome(same).content == '{"items": [1, 2]}'
    wrapped = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text="42")], structured_content={"result": 42}
    )
    assert call_outcome(wrapped).content == "42"
    text = mcp_types.CallToolResult(
        content=[mcp_types.TextContent(type="text", text="hello")],
        structured_content={"result": "hello"},
    )
    assert call_outcome(text).content == "hello"
