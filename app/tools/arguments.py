"""Checking a model's arguments against a tool's parameters, and merging context values.

Messages name parameters and types but never echo context values: they go back to the model.
"""

from __future__ import annotations

from typing import Any

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
    context_parameters: list[dict[str, Any]],
    context_values: dict[str, Any],
    *,
    optional: frozenset[str] = frozenset(),
) -> tuple[dict[str, Any], list[str]]:
    """The call's arguments with context values merged in, and the context problems.

    The server's value always wins: a model-supplied key with a context parameter's name was
    already dropped by the caller. A context parameter in `optional` may be absent.
    """
    merged = dict(arguments)
    problems = []
    for context in context_parameters:
        name = context["name"]
        if name not in context_values:
            if name not in optional:
                problems.append(
                    f"missing context argument '{name}': the caller must supply it "
                    "in context_arguments"
                )
            continue
        value = context_values[name]
        if value_problems(name, value, context):
            problems.append(f"context argument '{name}' must be of type {context.get('type')}")
            continue
        merged[name] = value
    return merged, problems
