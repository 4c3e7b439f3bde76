"""GET /tools in each provider's format, against golden files written from the providers' docs."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.support.apps import TenantCredentials
from tests.support.documents import external_tool

GOLDEN = Path(__file__).resolve().parents[1] / "tools" / "golden"
PROVIDERS = ["openai", "openai-responses", "anthropic", "gemini"]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_each_format_matches_the_documented_shape(
    client: httpx.AsyncClient, acme: TenantCredentials, provider: str
) -> None:
    tool = external_tool()  # has a context parameter, user_id, which must never show
    tool["function"]["name"] = "get_weather"
    assert (await client.post("/tools/create", json=tool, headers=acme.headers)).status_code == 201
    golden = json.loads((GOLDEN / f"{provider}.json").read_text())

    one = await client.get(f"/tools/weather-api?format={provider}", headers=acme.headers)
    assert one.status_code == 200 and one.json() == golden
    listed = await client.get(f"/tools/?type=external&format={provider}", headers=acme.headers)
    assert listed.json() == [golden]
    assert "user_id" not in one.text


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_tool_without_parameters(
    client: httpx.AsyncClient, acme: TenantCredentials, provider: str
) -> None:
    tool = external_tool("ping-tool")
    tool["function"]["parameters"] = {"type": "object", "properties": {}, "required": []}
    await client.post("/tools/create", json=tool, headers=acme.headers)
    shown = (await client.get(f"/tools/ping-tool?format={provider}", headers=acme.headers)).json()
    if provider == "gemini":
        assert "parameters" not in shown  # Gemini: leave it unset for a function without any
    else:
        schema = (
            shown.get("input_schema") or shown.get("parameters") or shown["function"]["parameters"]
        )
        assert schema == {
            "type": "object",
            "properties": {},
            "required": [],
            "additionalProperties": False,
        }


async def test_incompatibilities_are_reported_not_refused(
    client: httpx.AsyncClient, acme: TenantCredentials
) -> None:
    tool = external_tool("digits")
    tool["function"]["name"] = "3d_render"
    created = await client.post("/tools/create", json=tool, headers=acme.headers)
    assert created.status_code == 201
    reason = ["function name '3d_render' must start with a letter or an underscore"]
    assert created.json()["incompatible_providers"] == {"gemini": reason}
    fetched = (await client.get("/tools/digits", headers=acme.headers)).json()
    assert fetched["incompatible_providers"] == {"gemini": reason}
    fine = (await client.get("/tools/rolldice", headers=acme.headers)).json()
    assert "incompatible_providers" not in fine


async def test_unknown_format_is_422(client: httpx.AsyncClient, acme: TenantCredentials) -> None:
    response = await client.get("/tools/?format=cohere", headers=acme.headers)
    assert response.status_code == 422 and response.json()["errors"][0]["path"] == "query.format"
