"""One provider-name rule (`name_problems`) and one way to make a safe name (`safe_tool_name`),
used by stored tools, the OpenAPI importer and MCP tools alike."""

from __future__ import annotations

import pytest

from app.mcp.config import exposed_tool_name
from app.mcp.tools import schema_incompatibilities
from app.schemas.fields import name_problems, safe_tool_name
from app.tools.openapi import tool_name

AWKWARD = [
    "get_current_time",
    "search.pages/v2",
    "2fa verify",
    "-dash-first",
    "__dunder__",
    "ñandú",
    "",
    "///",
    "x" * 200,
    "a" * 63 + "é",
]
EVERY = {"openai", "openai-strict", "openai-responses", "anthropic", "gemini"}


def test_a_name_every_provider_takes_has_no_problems() -> None:
    assert name_problems("weather_api") == {}
    assert name_problems("_private-1") == {}


def test_gemini_wants_a_letter_or_an_underscore_first() -> None:
    reason = "function name '1st' must start with a letter or an underscore"
    assert name_problems("1st") == {"gemini": [reason]}
    assert set(name_problems("-x")) == {"gemini"}
    assert set(name_problems("ñame")) == EVERY  # not ASCII: no provider takes it


@pytest.mark.parametrize("name", ["a.b", "a b", "x" * 65, "", "name\n"])
def test_the_shared_pattern_binds_every_provider(name: str) -> None:
    assert set(name_problems(name)) == EVERY


@pytest.mark.parametrize("text", AWKWARD)
def test_safe_names_are_taken_by_every_provider(text: str) -> None:
    name = safe_tool_name(text)
    assert name_problems(name) == {}, name
    assert len(name) <= 64


def test_safe_names_keep_what_is_safe_and_stay_distinct_when_cut() -> None:
    assert safe_tool_name("search.pages/v2") == "search_pages_v2"
    assert safe_tool_name("2fa") == "_2fa"
    a, b = safe_tool_name("t" * 80 + "a"), safe_tool_name("t" * 80 + "b")
    assert len(a) == len(b) == 64 and a != b
    assert safe_tool_name("pets", prefix="shop_") == "shop_pets"


@pytest.mark.parametrize("text", AWKWARD)
def test_mcp_tools_and_imported_operations_are_named_by_the_one_function(text: str) -> None:
    assert exposed_tool_name("docs", text) == safe_tool_name(text, prefix="docs__")
    assert tool_name(text, "get", "/x", "shop_") == safe_tool_name(text or "get /x", prefix="shop_")
    assert tool_name("", "get", "/pets/{petId}") == "get_pets_petId"


def test_mcp_tools_judge_names_by_the_one_rule() -> None:
    schema = {"type": "object", "properties": {}}
    for name in ("docs__fine", "1pass__x", "ñame"):
        assert schema_incompatibilities(name, schema) == name_problems(name)
