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


MAX_PROBLEMS = 10  # messages about one call's arguments, at most
_SHOWN = 200  # characters of one message (it may quote the model's own value)


def argument_problems(arguments: dict[str, Any], validator: Any) -> list[str]:
    """Every way `arguments` breaks the tool's compiled schema, each naming the argument's path
    (`address.zip`, `items[0].qty`): unknown keys, missing ones, types, enums, patterns, bounds.
    The first check is a plain yes/no; messages are built only for a call that fails."""
    if validator.is_valid(arguments):
        return []
    unknown: list[str] = []
    missing: list[str] = []
    other: list[str] = []
    for error in validator.iter_errors(arguments):
        where = argument_path(error.instance_path)
        kind = type(error.kind).__name__
        if kind == "AdditionalProperties":
            names = ", ".join(f"'{name}'" for name in error.kind.unexpected)
            unknown.append(
                f"unknown argument {names}"
                if not where
                else f"'{where}' has unknown member {names}"
            )
        elif kind == "Required":
            name = error.kind.property
            missing.append(
                f"missing required argument '{name}'"
                if not where
                else f"'{where}' is missing its required member '{name}'"
            )
        else:
            other.append(_message(where, kind, error))
        if len(unknown) + len(missing) + len(other) >= MAX_PROBLEMS:
            break
    return [text[:_SHOWN] for text in unknown + missing + other]


def _message(where: str, kind: str, error: Any) -> str:
    shown = where or "the arguments"
    if kind == "Type":
        types = [t for t in error.kind.types if t != "null"]
        if len(types) == 1:
            article = "an" if types[0] in ("integer", "array", "object") else "a"
            nullable = " (or null)" if "null" in error.kind.types else ""
            return f"'{shown}' must be {article} {types[0]}{nullable}"
    if kind == "Enum":
        return f"'{shown}' must be one of {', '.join(map(repr, error.kind.options))}"
    return f"'{shown}': {error.message}"


def argument_path(parts: Sequence[str | int]) -> str:
    """`['items', 0, 'qty']` as `items[0].qty`."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def value_problems(name: str, value: Any, schema: dict[str, Any]) -> list[str]:
    """A context value against its slot's schema (a scalar or an array of scalars)."""
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
