"""Units of the toolkit features: JMESPath shaping, the hints block, categories and
post-processors declared at registration, presets merged over the caller."""

from __future__ import annotations

from typing import Any

import jmespath
import pytest

from app.services.catalog import CategoryState
from app.services.toolbox import category_on, usage_hints
from app.tools.arguments import merge_context
from app.tools.registry import FunctionRegistry, ToolRequest
from app.tools.shaping import selected
from app.tools.typed import ContextSlot, FunctionTool


@pytest.mark.parametrize(
    ("expression", "content", "expected"),
    [
        ("a", '{"a": 1}', ("1", None)),
        ("a", '{"a": "text"}', ("text", None)),  # a string is the text itself
        ("items[].id", '{"items": [{"id": 1}, {"id": 2}]}', ("[1,2]", None)),
        ("a", "plain", ("plain", "output.select not applied: the result is not JSON")),
        (
            "a",
            '{"b": 1}',
            ('{"b": 1}', "output.select not applied: the expression matched nothing"),
        ),
    ],
)
def test_selected(expression: str, content: str, expected: tuple[str, str | None]) -> None:
    assert selected(jmespath.compile(expression), content) == expected


def test_a_function_given_the_wrong_type_leaves_the_output() -> None:
    content, note = selected(jmespath.compile("length(a)"), '{"a": 5}')
    assert content == '{"a": 5}' and note is not None and note.startswith("output.select not")


def _tool(name: str, category: str) -> FunctionTool:
    return FunctionTool(
        tool_id=name,
        name=name,
        description="",
        parameters={},
        json_parameters={},
        category=category,
    )


def test_hints_are_sections_default_first_then_by_name_only_with_text() -> None:
    states = {
        "maps": CategoryState("maps", enabled=True, usage_hints="  For places.  "),
        "charts": CategoryState("charts", enabled=True, usage_hints="For charts."),
        "quiet": CategoryState("quiet", enabled=True, usage_hints=""),
        "default": CategoryState("default", enabled=True, usage_hints="Everyday."),
    }
    tools = [_tool("m", "maps"), _tool("q", "quiet"), _tool("c", "charts"), _tool("d", "default")]
    hints = usage_hints(tools, states)
    assert hints.categories == ["default", "charts", "maps"]
    assert hints.content == (
        "## default tools\nEveryday.\n\n## charts tools\nFor charts.\n\n## maps tools\nFor places."
    )
    assert usage_hints([], states).content is None


def test_default_is_always_on_and_an_unknown_category_is_off() -> None:
    states = {"off": CategoryState("off", enabled=False), "on": CategoryState("on", enabled=True)}
    assert category_on("default", {}) and category_on("on", states)
    assert not category_on("off", states) and not category_on("gone", states)


def test_categories_and_post_processors_are_declared_at_registration() -> None:
    registry = FunctionRegistry()

    def post(request: ToolRequest, result: Any) -> Any:
        return result

    @registry.register(category="charts", postprocess=post)
    def draw(kind: str) -> str:
        """Draw.

        Args:
            kind: What.
        """
        return kind

    entry = registry.get("draw")
    assert entry is not None and entry.category == "charts" and entry.postprocess is post
    assert entry.seed_document()["category"] == "charts"
    assert registry.problems() == []


def test_bad_declarations_are_startup_problems() -> None:
    registry = FunctionRegistry()

    async def later(request: ToolRequest, result: Any) -> Any:
        return result

    @registry.register(category="not a name", postprocess=later)  # type: ignore[arg-type]
    def draw() -> str:
        """Draw."""
        return ""

    problems = registry.problems()
    assert any("postprocess must be a plain function" in p for p in problems), problems
    assert any("category 'not a name' is not a valid name" in p for p in problems), problems


def test_a_preset_wins_over_the_caller_and_needs_no_context() -> None:
    slots = (ContextSlot("base", "base", required=True, preset="/srv"),)
    merged, problems = merge_context({"page": "a"}, slots, {"base": "/etc"}, {})
    assert merged == {"page": "a", "base": "/srv"} and problems == []
    merged, problems = merge_context({}, slots, {}, {})
    assert merged == {"base": "/srv"} and problems == []


DOUBLING = [
    ("|".join(["[@,@]"] * 170) + "|to_string(@)", '"ab"'),  # 22 steps took 12 s before
    ("|".join(["join('', [@,@])"] * 60), '"abcd"'),
    ("|".join(["[@,@][]"] * 100), "[1, 2]"),
    ("|".join(["{a: @, b: @}"] * 150) + "|values(@)", "{}"),
]


@pytest.mark.parametrize(("expression", "content"), DOUBLING)
def test_an_expression_that_doubles_its_value_stops_at_the_budget(
    expression: str, content: str
) -> None:
    shown, note = selected(jmespath.compile(expression), content)
    assert shown == content
    assert note == "output.select not applied: it makes a value far larger than the result"


def test_deep_nesting_is_a_note_not_a_crash() -> None:
    shown, note = selected(jmespath.compile("[" * 300 + "@" + "]" * 300), "1")
    assert shown == "1" and note == "output.select not applied: the selection nests too deeply"


def test_ordinary_selections_of_large_results_pass() -> None:
    rows = ",".join(f'{{"id": {i}, "name": "row-{i}"}}' for i in range(5000))
    shown, note = selected(
        jmespath.compile("length(items[?id > `10`].name)"), f'{{"items": [{rows}]}}'
    )
    assert (shown, note) == ("4989", None)
