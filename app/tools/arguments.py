"""Checking a model's arguments against a tool's parameters, and merging context values.

Messages name parameters and types but never echo context values: they go back to the model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from app.tools.outcome import unset_secret

if TYPE_CHECKING:  # typed.py reads the definition rules, which check values with this module
    from app.tools.typed import ContextSlot

_SCALAR_CHECKS = {
    "string": lambda v: isinstance(v, str),
    # bool is an int in Python; JSON true is not an integer.
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
}


def argument_problems(arguments: dict[str, Any], parameters: dict[str, Any]) -> list[str]:
    """Every way `arguments` breaks the schema: unknown keys, required, types, enums, bounds."""
    properties: dict[str, Any] = parameters.get("properties", {})
    problems = [f"unknown argument '{key}'" for key in arguments if key not in properties]
    problems += [
        f"missing required argument '{name}'"
        for name in parameters.get("required", [])
        if name not in arguments
    ]
    for name, value in arguments.items():
        if name in properties:
            problems += value_problems(name, value, properties[name])
    return problems


def value_problems(name: str, value: Any, schema: dict[str, Any]) -> list[str]:
    kind = schema.get("type", "string")
    if kind == "array":
        if not isinstance(value, list):
            return [f"'{name}' must be an array"]
        problems = []
        low, high = schema.get("min_items"), schema.get("max_items")
        if low is not None and len(value) < low:
            problems.append(f"'{name}' must have at least {low} item(s), got {len(value)}")
        if high is not None and len(value) > high:
            problems.append(f"'{name}' must have at most {high} item(s), got {len(value)}")
        item_schema = schema.get("items") or {"type": "string"}
        for index, item in enumerate(value):
            problems += value_problems(f"{name}[{index}]", item, item_schema)
        return problems
    if not _SCALAR_CHECKS[kind](value):
        return [f"'{name}' must be {'an' if kind == 'integer' else 'a'} {kind}"]
    enum = schema.get("enum")
    if enum is not None and value not in enum:
        return [f"'{name}' must be one of {', '.join(map(repr, enum))}"]
    return []


def merge_context(
    arguments: dict[str, Any],
    slots: Sequence[ContextSlot],
    context: Mapping[str, Any],
    secrets: Mapping[str, str | None],
) -> tuple[dict[str, Any], list[str]]:
    """The call's arguments with context values merged in, and the context problems.

    The server's value always wins: a caller-supplied key with a context parameter's name was
    already dropped. A secret-backed slot takes its secret's value and a preset slot the value
    of the tool document (checked when it was written), never the caller's.
    """
    merged = dict(arguments)
    problems = []
    for slot in slots:
        if slot.preset is not None:
            merged[slot.argument] = slot.preset
            continue
        if slot.secret is not None:
            value = secrets.get(slot.secret)
            if value is None:
                problems.append(unset_secret(slot.secret))
                continue
        elif slot.name in context:
            value = context[slot.name]
        else:
            if slot.required:
                problems.append(
                    f"missing context argument '{slot.name}': the caller must supply it "
                    "in context_arguments"
                )
            continue
        if slot.schema is not None and value_problems(slot.name, value, slot.schema):
            problems.append(
                f"context argument '{slot.name}' must be of type {slot.schema.get('type')}"
            )
            continue
        merged[slot.argument] = value
    return merged, problems
