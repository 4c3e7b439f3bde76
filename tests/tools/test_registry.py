"""The function dictionary: definitions from signatures and docstrings, and start-up checks."""

from __future__ import annotations

import pytest

from app.tools.registry import (
    FunctionDictionaryError,
    FunctionRegistry,
    load_registry,
    validate_registry,
)
from app.tools.signature import parse_docstring


def test_definition_from_signature_and_google_docstring() -> None:
    registry = FunctionRegistry()

    @registry.register(tool_id="weather", tags=["weather"], context_parameters=["user_id"])
    def get_weather(
        city: str,
        user_id: str,
        days: list[int] | None = None,
        units: str = "metric",
        precise: bool = False,
        lat: float = 0.0,
    ) -> str:
        """Get the weather forecast.

        Longer text that is not part of the summary.

        Args:
            city: The city to look up,
                spelled in English.
            user_id: Whose preferences to use.
            days (list[int]): Day offsets.
            units: metric or imperial.

        Returns:
            A forecast.
        """
        return city

    assert registry.problems() == []
    entry = registry.get("get_weather")
    assert entry is not None and entry.tool_id == "weather"
    doc = entry.seed_document()
    assert doc["function"]["description"] == "Get the weather forecast."
    props = doc["function"]["parameters"]["properties"]
    assert props["city"] == {
        "type": "string",
        "description": "The city to look up, spelled in English.",
    }
    assert props["days"] == {
        "type": "array",
        "items": {"type": "integer"},
        "description": "Day offsets.",
    }
    assert props["precise"]["type"] == "boolean" and props["lat"]["type"] == "number"
    assert "user_id" not in props
    assert doc["function"]["parameters"]["required"] == ["city"]
    assert doc["context_parameters"] == [
        {"name": "user_id", "type": "string", "description": "Whose preferences to use."}
    ]


def test_docstring_without_sections() -> None:
    def f() -> None:
        """Just a summary
        on two lines."""

    assert parse_docstring(f) == ("Just a summary on two lines.", {})


def test_hand_written_definition_is_checked_against_the_signature() -> None:
    registry = FunctionRegistry()

    def lookup(query: str, limit: int = 10) -> list[str]:
        return [query] * limit

    registry.register(
        lookup,
        description="Search.",
        parameters={
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["query"],
        },
    )
    assert registry.problems() == []


def test_broken_dictionary_lists_every_problem() -> None:
    registry = load_registry("tests.fixtures.broken_functions:registry")
    with pytest.raises(FunctionDictionaryError) as caught:
        validate_registry(registry)
    text = str(caught.value)
    expected = [
        "wrong_type: 'count' is declared integer (expects int) but wrong_type() annotates it str",
        "optional_marked_required: 'city' is required but optional_marked_required() gives it "
        "a default",
        "required_without_mark: 'city' is optional but required_without_mark() has no default",
        "missing_parameter: missing_parameter() takes 'country' but the definition does not "
        "declare it",
        "missing_parameter: 'zip' is not a parameter of missing_parameter()",
        "context_not_a_parameter: 'user_id' is not a parameter of context_not_a_parameter()",
        "unsupported: parameter 'payload' has an unsupported type",
        "fine: registered twice",
    ]
    for line in expected:
        assert line in text, line
    assert len(caught.value.problems) == 9  # unsupported also misses 'payload' in its definition
    assert text.startswith("the function dictionary has 9 problem(s):\n  - ")


@pytest.mark.parametrize(
    "path", ["no.such.module:registry", "app.tools.builtin:nothing", "app.config:Settings"]
)
def test_unloadable_function_module(path: str) -> None:
    with pytest.raises(FunctionDictionaryError, match="FUNCTIONS_MODULE"):
        load_registry(path)
