"""`/mcp` as real third-party MCP software meets it, on a real port: openai-agents with its
defaults (5 s for `tools/list`) past a hung and a refusing server, the MCP Inspector CLI with a
wrong token, and the reference server `server-everything` behind toolgate (its structured
output and its image reach a client intact). The npm programs install on first use into a
machine-wide cache (tests/support/npm_tools.py)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import pty
import socket
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.support import fake_model as script
from tests.support.apps import create_tenant
from tests.support.fake_model import FakeModel
from tests.support.mcp_service import HUNG_STDIO, mcp_client, refusing_http, serve
from tests.support.npm_tools import NpmTools, npm_tools
from tests.support.secantus import free_port
from tests.support.servers import ThreadedServer

INSPECTOR_TIMEOUT_S = 60


@pytest.fixture(scope="session")
def npm() -> NpmTools:
    return npm_tools()


@pytest.mark.slow
async def test_openai_agents_with_its_defaults_lists_and_runs_past_hung_and_refusing_servers(
    fake_model_server: tuple[FakeModel, ThreadedServer],
) -> None:
    """The service's and the client's defaults: the listing deadline (2 s) stays inside the
    5 s openai-agents gives `tools/list`, in a direct listing and in an agent run, whose model
    (the scripted fake, through the SDK's chat-completions model) calls a tool over `/mcp`."""
    fake, model_server = fake_model_server
    fake.reset(script.tool_calls(("add", {"a": 2, "b": 3})), script.text("It is 5."))
    with socket.create_server(("127.0.0.1", 0)) as stalled:  # takes connections, never answers
        stalled_url = f"http://127.0.0.1:{stalled.getsockname()[1]}/mcp"
        await agents_run_past_stalled_servers(fake, model_server, stalled_url)


async def agents_run_past_stalled_servers(
    fake: FakeModel, model_server: ThreadedServer, stalled_url: str
) -> None:
    """The operator's hung stdio and refusing HTTP servers, and one the tenant registered that
    takes connections and never answers: all in the tenant's set, all listed concurrently."""
    # Imported here: openai-agents costs every test process 1.3 s of imports at collection.
    from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner
    from agents.mcp import MCPServerStreamableHttp
    from openai import AsyncOpenAI

    async with serve({"hung": HUNG_STDIO, "gone": refusing_http()}) as service:
        tenant = await create_tenant(service.http, "acme")
        stalled = {"name": "stalled", "type": "streamable-http", "url": stalled_url}
        created = await service.http.post("/mcp-servers", json=stalled, headers=tenant.headers)
        assert created.status_code == 201, created.text
        bearer = {"Authorization": f"Bearer {tenant.api_key}"}
        server = MCPServerStreamableHttp(params={"url": f"{service.url}/mcp", "headers": bearer})
        assert server.client_session_timeout_seconds == 5  # the default this test is about
        async with server:
            listed = {tool.name for tool in await server.list_tools()}
            assert "add" in listed
            assert not any(name.startswith(("hung__", "gone__", "stalled__")) for name in listed)

            model = AsyncOpenAI(
                base_url=f"{model_server.url}/v1", api_key="sk-test", timeout=10, max_retries=0
            )
            agent = Agent(
                name="assistant",
                mcp_servers=[server],
                model=OpenAIChatCompletionsModel(model="fake-model", openai_client=model),
            )
            run = await Runner.run(
                agent, "Add 2 and 3", run_config=RunConfig(tracing_disabled=True)
            )
    assert run.final_output == "It is 5."
    offered = {tool["function"]["name"] for tool in fake.requests[0]["tools"]}
    assert offered == listed
    [answer] = [m for m in fake.requests[1]["messages"] if m["role"] == "tool"]
    assert "5" in str(answer["content"])


def run_in_terminal(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run with stdin, stdout and stderr on a pseudo-terminal (a person at a terminal), and
    return the exit code and everything it printed."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(argv, stdin=follower, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    printed = bytearray()
    try:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            printed += chunk
        return process.wait(INSPECTOR_TIMEOUT_S), printed.decode(errors="replace")
    finally:
        os.close(leader)
        if process.poll() is None:
            process.kill()


def inspector_env(home: Path) -> dict[str, str]:
    """A home of its own (its catalog and secret store), secrets kept in memory only, and a
    free port for the OAuth callback listener it opens at a terminal (not its fixed 6276)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_")}
    callback = f"http://127.0.0.1:{free_port()}/oauth/callback"
    return {
        **env,
        "HOME": str(home),
        "MCP_INSPECTOR_SECRET_STORE": "memory",
        "MCP_OAUTH_CALLBACK_URL": callback,
    }


def inspector_list(npm: NpmTools, url: str, token: str, *extra: str) -> list[str]:
    return [
        *npm.inspector,
        "--cli",
        f"{url}/mcp",
        "--transport",
        "http",
        "--method",
        "tools/list",
        "--header",
        f"Authorization: Bearer {token}",
        *extra,
    ]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.mark.slow
async def test_the_inspector_cli_with_a_wrong_token_reports_it_and_starts_no_oauth(
    npm: NpmTools, home: Path
) -> None:
    """Inspector 2.12 treats any 401 over HTTP as "OAuth needed" before it reads anything the
    service sends. Non-interactive (`--stored-auth-only`, its CI form) it prints the 401 and
    its detail; at a terminal it looks for an authorization server, finds the service's
    statement that there is none, and prints it instead of opening a browser."""
    async with serve({}) as service:
        tenant = await create_tenant(service.http, "acme")
        env = inspector_env(home)
        right = inspector_list(npm, service.url, tenant.api_key)
        listed = await asyncio.to_thread(
            subprocess.run, right, env=env, capture_output=True, text=True, timeout=60
        )
        assert listed.returncode == 0, listed.stderr
        assert "add" in {tool["name"] for tool in json.loads(listed.stdout)["tools"]}

        ci = inspector_list(npm, service.url, "tg_wrong", "--stored-auth-only")
        refused = await asyncio.to_thread(
            subprocess.run, ci, env=env, capture_output=True, text=True, timeout=60
        )
        assert refused.returncode == 3, refused.stderr  # its exit code for auth_required
        assert "The API key is not valid" in refused.stdout + refused.stderr

        code, printed = await asyncio.to_thread(
            run_in_terminal, inspector_list(npm, service.url, "tg_wrong"), env
        )
        assert code != 0, printed
        assert "toolgate issues no OAuth tokens" in printed, printed
        assert "/authorize" not in printed, printed  # it got no authorization URL to open


def everything_tool(tools: list[Any], name: str) -> Any:
    [tool] = [tool for tool in tools if tool.name == name]
    return tool


@pytest.mark.slow
async def test_server_everything_structured_output_and_image_pass_through_intact(
    npm: NpmTools,
) -> None:
    """The same calls straight to server-everything and through toolgate's `/mcp`: the output
    schema, the structured content (valid against it) and the image's bytes agree."""
    command, *args = npm.everything
    direct_params = StdioServerParameters(command=command, args=args)
    async with stdio_client(direct_params) as (read, write), ClientSession(read, write) as direct:
        await direct.initialize()
        direct_tools = (await direct.list_tools()).tools
        direct_image = await direct.call_tool("get-tiny-image", {})

    everything = {"type": "stdio", "command": command, "args": args}
    async with serve({"everything": everything}) as service:
        tenant = await create_tenant(service.http, "acme")
        async with mcp_client(service.url, tenant.api_key) as client:
            served = (await client.list_tools()).tools
            weather = await client.call_tool(
                "everything__get-structured-content", {"location": "Chicago"}
            )
            image = await client.call_tool("everything__get-tiny-image", {})

    schema = everything_tool(direct_tools, "get-structured-content").output_schema
    served_schema = everything_tool(served, "everything__get-structured-content").output_schema
    assert schema and served_schema == schema
    assert not weather.is_error and weather.structured_content is not None
    jsonschema.validate(weather.structured_content, schema)
    assert json.loads(weather.content[0].text) == weather.structured_content  # type: ignore[union-attr]

    [direct_png] = [part for part in direct_image.content if part.type == "image"]
    [served_png] = [part for part in image.content if part.type == "image"]
    assert served_png.mime_type == direct_png.mime_type == "image/png"
    assert served_png.data == direct_png.data
    assert base64.b64decode(served_png.data).startswith(b"\x89PNG")


async def test_oauth_discovery_and_registration_get_a_404_that_says_how_tokens_are_issued() -> None:
    """What an OAuth client asks for after a 401 (RFC 8414 and OpenID discovery, the SDKs'
    default registration), whatever it sends: a 404 naming the tenant's admin, never a 500."""
    async with serve({}) as service:
        asks = [
            service.http.get("/.well-known/oauth-authorization-server"),
            service.http.get("/.well-known/oauth-authorization-server/mcp"),
            service.http.get("/.well-known/openid-configuration"),
            service.http.post("/register", json={"redirect_uris": ["http://127.0.0.1:1/cb"]}),
            service.http.post("/register", content=b"[" * 100_000 + b"]" * 100_000),
            service.http.post("/register", json="not an object"),
        ]
        for answer in await asyncio.gather(*asks):
            assert answer.status_code == 404, answer.text
            assert "toolgate issues no OAuth tokens" in answer.json()["detail"]
            assert "POST /client-tokens" in answer.json()["detail"]
        oversized = await service.http.post("/register", content=b"x" * 2_000_000)
        assert oversized.status_code == 413 and "larger than the limit" in oversized.text
