"""What an upstream MCP server's tools give reaches an MCP client of `/mcp` as the server gave
it: `outputSchema`, `structuredContent`, images, audio, embedded resources and resource links,
with the run's hidden values scrubbed (an image holding one is withheld, not altered)."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.support.apps import create_tenant
from tests.support.mcp_demo import PIXEL_PNG, McpDemoServer
from tests.support.mcp_service import Service, mcp_client, serve

CANARY = "cnry-user-3d91e7"


async def bound_token(service: Service, api_key: str) -> str:
    created = await service.http.post(
        "/client-tokens",
        json={"name": "alice", "context_arguments": {"user_id": CANARY}},
        headers={"Authorization": f"Bearer {api_key}"},
    )
    assert created.status_code == 201, created.text
    token: str = created.json()["token"]
    return token


@pytest.fixture
def upstream(demo_http: McpDemoServer) -> dict[str, Any]:
    return {
        "type": "streamable-http",
        "url": demo_http.url,
        "context": {"user_id": {"argument": "user_id"}},
    }


async def test_structured_output_and_its_schema_pass_through(upstream: dict[str, Any]) -> None:
    async with serve({"demo": upstream}) as service:
        tenant = await create_tenant(service.http, "acme")
        async with mcp_client(service.url, tenant.api_key) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            schema = tools["demo__weather"].output_schema
            assert schema is not None and set(schema["properties"]) == {"city", "celsius"}
            assert tools["demo__add"].output_schema is not None  # the SDK wraps plain returns
            result = await client.call_tool("demo__weather", {"city": "Oslo"})
            assert not result.is_error
            assert result.structured_content == {"city": "Oslo", "celsius": 21.5}
            assert '"city"' in result.content[0].text  # the text stays for text-only clients


async def test_images_audio_and_resources_pass_through_scrubbed(upstream: dict[str, Any]) -> None:
    async with serve({"demo": upstream}) as service:
        tenant = await create_tenant(service.http, "acme")
        token = await bound_token(service, tenant.api_key)
        async with mcp_client(service.url, token) as client:
            result = await client.call_tool("demo__picture", {})
        assert not result.is_error
        kinds = [block.type for block in result.content]
        assert kinds == ["text", "image", "text", "audio", "resource", "resource_link"]
        text, image, withheld, audio, resource, link = result.content
        assert text.text == "a picture for [redacted]"
        assert (image.data, image.mime_type) == (PIXEL_PNG, "image/png")  # intact
        assert withheld.text == "[image withheld: [redacted] in it]"  # the user id was in it
        assert base64.b64decode(audio.data) == b"RIFF....WAVE"
        assert resource.resource.text == "note for [redacted]"
        assert str(link.uri) == "https://files.test/[redacted]"
        assert CANARY not in result.model_dump_json()
