"""Output shaping, per-tool timeouts and presets in tool documents: what a write accepts (422 for
everything else, naming the field), and how they act on an external tool against a real API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from tests.support.documents import external, external_tool
from tests.support.servers import ThreadedServer
from tests.support.toolkit import Kit, reshape, toolkit_app


@pytest.fixture
async def kit() -> AsyncIterator[Kit]:
    async with toolkit_app(tool_output_max_chars=20_000) as running:
        yield running


async def _refused(kit: Kit, **fields: Any) -> dict[str, str]:
    answer = await kit.post("/tools/create", external_tool(**fields))
    assert answer.status_code == 422, answer.text
    return {e["path"]: e["message"] for e in answer.json()["errors"]}


@pytest.mark.parametrize(
    "select",
    ["a[", "foo[?bar", "`{", "&&&", "a.b)", "(" * 600 + "a" + ")" * 600, "[" * 1000],
)
async def test_a_select_that_is_not_jmespath_is_422(kit: Kit, select: str) -> None:
    errors = await _refused(kit, output={"select": select})
    assert "$.output.select" in errors, errors


@pytest.mark.parametrize(
    ("output", "path"),
    [
        ({"select": "a" * 1025}, "output.select"),
        ({"select": ""}, "output.select"),
        ({"select": 5}, "output.select"),
        ({"select": ["a"]}, "output.select"),
        ({"max_chars": 20_001}, "$.output.max_chars"),  # over TOOL_OUTPUT_MAX_CHARS
        ({"max_chars": 10**12}, "output.max_chars"),
        ({"max_chars": 10**30}, "output.max_chars"),
        ({"max_chars": 0}, "output.max_chars"),
        ({"max_chars": "100"}, "output.max_chars"),
        ({"max_chars": True}, "output.max_chars"),
        ({"max_chars": 1.5}, "output.max_chars"),
        ({"other": 1}, "output.other"),
    ],
)
async def test_bad_output_settings_are_422(kit: Kit, output: Any, path: str) -> None:
    errors = await _refused(kit, output=output)
    assert any(path in where for where in errors), errors


@pytest.mark.parametrize("timeout_s", [5.5, 601, 0, -1, "1", True, 10**20])
async def test_bad_timeouts_are_422(kit: Kit, timeout_s: Any) -> None:
    errors = await _refused(kit, timeout_s=timeout_s)
    assert any("timeout_s" in where for where in errors), errors


async def test_bounds_under_the_ceiling_are_kept(kit: Kit) -> None:
    tool = external_tool(output={"select": "items[].id", "max_chars": 500}, timeout_s=2.5)
    answer = await kit.post("/tools/create", tool)
    assert answer.status_code == 201, answer.text
    shown = answer.json()
    assert shown["output"] == {"select": "items[].id", "max_chars": 500}
    assert shown["timeout_s"] == 2.5


@pytest.mark.parametrize(
    ("parameter", "reason"),
    [
        ({"name": "n", "type": "integer", "value": "3"}, "not of the parameter's type"),
        ({"name": "n", "type": "integer", "value": True}, "not of the parameter's type"),
        ({"name": "n", "type": "integer", "value": 3.5}, "not of the parameter's type"),
        ({"name": "n", "type": "string", "value": 5}, "not of the parameter's type"),
        ({"name": "n", "type": "boolean", "value": 1}, "not of the parameter's type"),
        ({"name": "n", "type": "number", "value": "1.5"}, "not of the parameter's type"),
        ({"name": "n", "type": "array", "value": "a"}, "not of the parameter's type"),
        ({"name": "n", "type": "string", "value": ["a"]}, "not of the parameter's type"),
        ({"name": "n", "type": "string", "value": "k", "secret": "key"}, "not both"),
    ],
)
async def test_a_preset_of_the_wrong_type_is_422(
    kit: Kit, parameter: dict[str, Any], reason: str
) -> None:
    errors = await _refused(kit, context_parameters=[parameter])
    assert reason in errors["$.context_parameters[0].value"], errors


@pytest.mark.parametrize(
    "value",
    [2**63, 2**53 + 1, {"a": 1}, [1, 2], ["a", None], "x" * 4097, ["a"] * 257, [["a"]]],
)
async def test_presets_that_cannot_be_a_value_are_422(kit: Kit, value: Any) -> None:
    parameter = {"name": "n", "type": "array", "value": value}
    errors = await _refused(kit, context_parameters=[parameter])
    assert any("context_parameters" in where for where in errors), errors


async def test_a_function_tools_preset_matches_its_signature(kit: Kit) -> None:
    doc = (await kit.http.get("/tools/fetch-page", headers=kit.acme.headers)).json()
    for shown_only in ("created_at", "updated_at", "incompatible_providers", "tool_id"):
        doc.pop(shown_only, None)
    doc["context_parameters"][1] = {"name": "retries", "type": "string", "value": "3"}
    answer = await kit.http.put("/tools/fetch-page", json=doc, headers=kit.acme.headers)
    assert answer.status_code == 422 and "annotates it int" in answer.text


async def test_a_preset_header_reaches_the_api_and_the_callers_never_does(
    kit: Kit, upstream: ThreadedServer
) -> None:
    preset = {"name": "X-Api-Version", "in": "header", "value": "2026-11"}
    tool = external(
        "versioned",
        f"{upstream.url}/p/v",
        context_parameters=[preset],
        output={"select": 'headers."x-api-version"'},
    )
    assert (await kit.post("/tools/create", tool)).status_code == 201
    body = {"arguments": {"city": "Oslo"}, "context_arguments": {"X-Api-Version": "1999-01"}}
    answer = (await kit.post("/tools/versioned/invoke", body)).json()
    assert answer["status"] == "ok" and answer["content"] == "[redacted]"  # hidden, but there
    show = {**tool, "tool_id": "shown", "function": {**tool["function"], "name": "shown"}}
    show["output"] = {"select": 'headers."x-api-version" == `"2026-11"`'}
    assert (await kit.post("/tools/create", show)).status_code == 201
    assert (await kit.post("/tools/shown/invoke", body)).json()["content"] == "true"


async def test_a_large_json_result_is_shaped_off_the_event_loop(
    kit: Kit, upstream: ThreadedServer
) -> None:
    """About 100 KB of JSON echoed back, searched by an expression that sorts it: the loop
    watchdog fails this test if the work held the app's event loop."""
    tool = external(
        "bulk",
        f"{upstream.url}/p/bulk",
        method="POST",
        properties={"rows": {"type": "array", "items": {"type": "string"}}},
        output={"select": "length(sort(json.rows))", "max_chars": 100},
    )
    assert (await kit.post("/tools/create", tool)).status_code == 201
    rows = [f"row-{i:06d}-{'z' * 20}" for i in range(3_000)]
    answer = await kit.post("/tools/bulk/invoke", {"arguments": {"rows": rows}})
    assert answer.status_code == 200, answer.text
    assert answer.json()["content"] == "3000", orjson.dumps(answer.json())[:300]


async def test_a_doubling_select_stops_quickly_and_off_the_loop(kit: Kit) -> None:
    """Each step doubles the value: unbounded, 150 steps would never end. The loop watchdog
    fails this test if the app's loop stalled."""
    expression = "|".join(["[@,@]"] * 150) + "|to_string(@)"
    answer = await reshape(kit, "inventory", output={"select": expression})
    assert answer.status_code == 200, answer.text
    invoked = (await kit.post("/tools/inventory/invoke", {"arguments": {"item": "nut"}})).json()
    assert invoked["status"] == "ok" and invoked["content"].startswith('{"item":"nut"')
    assert (
        invoked["note"] == "output.select not applied: it makes a value far larger than the result"
    )
