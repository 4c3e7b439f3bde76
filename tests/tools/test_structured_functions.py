"""Function tools whose signatures take nested pydantic models and TypedDicts (issue 29): their
schema (with `$defs`), the arguments checked against it, and the function given real models."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from pydantic import BaseModel, Field
from typing_extensions import TypedDict  # pydantic's rule on Python 3.11

from app.schemas.tools import StoredTool
from app.tools.arguments import argument_problems
from app.tools.executors import CallScope
from app.tools.executors.function import FunctionExecutor
from app.tools.registry import FunctionRegistry
from app.tools.typed import parse_stored_tool

registry = FunctionRegistry()
RECEIVED: list[Any] = []


class Line(BaseModel):
    sku: str = Field(pattern=r"^[A-Z]{3}-\d+$")
    qty: int = Field(ge=1, le=10)


class Order(BaseModel):
    lines: list[Line]
    rush: bool = False


class Where(TypedDict):
    city: str
    zip: str


@registry.register(blocking=False)
def place(order: Order, ship_to: Where, mode: Literal["a", "b"] = "a") -> str:
    """Place an order.

    Args:
        order: What to send.
        ship_to: Where to send it.
        mode: How.
    """
    RECEIVED.append((order, ship_to))
    return f"{len(order.lines)} line(s) to {ship_to['city']}"


def _typed() -> Any:
    entry = registry.get("place")
    assert entry is not None
    doc = {**entry.seed_document(), "created_at": "2026-01-01T00:00:00Z"}
    doc["updated_at"] = doc["created_at"]
    StoredTool.model_validate(doc)
    return parse_stored_tool(doc)[1]


def test_the_signature_becomes_json_schema_with_defs() -> None:
    assert registry.problems() == []
    entry = registry.get("place")
    assert entry is not None
    parameters = entry.function.parameters.model_dump(exclude_none=True)
    assert parameters["required"] == ["order", "ship_to"]
    order = parameters["properties"]["order"]
    assert order["type"] == "object" and order["description"] == "What to send."
    assert order["properties"]["lines"] == {"type": "array", "items": {"$ref": "#/$defs/Line"}}
    assert parameters["properties"]["ship_to"]["required"] == ["city", "zip"]
    line = parameters["$defs"]["Line"]
    assert line["properties"]["qty"] == {"type": "integer", "minimum": 1, "maximum": 10}
    assert "title" not in line and "title" not in line["properties"]["sku"]
    assert parameters["properties"]["mode"] == {
        "type": "string",
        "enum": ["a", "b"],
        "description": "How.",
    }


def test_arguments_are_checked_at_every_depth() -> None:
    tool = _typed()
    good = {
        "order": {"lines": [{"sku": "ABC-1", "qty": 2}]},
        "ship_to": {"city": "Oslo", "zip": "1"},
    }
    assert argument_problems(good, tool.validator) == []
    bad = {"order": {"lines": [{"sku": "abc", "qty": 11}]}, "ship_to": {"city": "Oslo"}}
    problems = argument_problems(bad, tool.validator)
    assert "'ship_to' is missing its required member 'zip'" in problems
    assert any(p.startswith("'order.lines[0].sku': \"abc\" does not match") for p in problems)
    assert any(p.startswith("'order.lines[0].qty': 11 is greater than") for p in problems)


async def test_the_function_gets_models_not_dicts() -> None:
    RECEIVED.clear()
    with ThreadPoolExecutor(1) as threads:
        executor = FunctionExecutor(registry=registry, threads=threads)
        arguments = {
            "order": {"lines": [{"sku": "ABC-1", "qty": 2}]},
            "ship_to": {"city": "Oslo", "zip": "1"},
        }
        outcome = await executor.run(_typed(), arguments, CallScope())
    assert outcome.status == "ok" and outcome.content == "1 line(s) to Oslo"
    order, ship_to = RECEIVED[0]
    assert isinstance(order, Order) and order.lines[0] == Line(sku="ABC-1", qty=2)
    assert ship_to == {"city": "Oslo", "zip": "1"}
