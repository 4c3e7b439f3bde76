"""Reading an OpenAPI document's fields without trusting their types."""

from __future__ import annotations

import re
from typing import Any

from app.schemas.fields import NAME_PATTERN
from app.tools.openapi_refs import Skip

SHOWN = 100  # characters of a document's text quoted in a reason
NAME = re.compile(NAME_PATTERN)  # a tool parameter's name (fullmatch: `$` matches before "\n")


def kind(value: Any) -> str:
    """What a JSON value is, for a reason: `a number`, `a list`, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, dict) else f"a {type(value).__name__}"


def short(text: str) -> str:
    """`text` as quoted in a reason: at most `SHOWN` characters."""
    return text if len(text) <= SHOWN else text[:SHOWN] + "..."


def text_field(node: dict[str, Any], key: str, owner: str = "its") -> str:
    """A string field ('' when absent); any other type skips the operation."""
    value = node.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise Skip(f"{owner} '{key}' is {kind(value)}, not a string")
    return value


def scalar_texts(values: Any, what: str) -> list[str]:
    """An `enum`'s values as text (null left out); anything but a list of scalars skips."""
    if values is None:
        return []
    if not isinstance(values, list):
        raise Skip(f"{what} is {kind(values)}, not a list")
    texts = []
    for value in values:
        if isinstance(value, dict | list):
            raise Skip(f"{what} holds {kind(value)}, not only scalars")
        if isinstance(value, bool):
            texts.append("true" if value else "false")
        elif value is not None and str(value):
            texts.append(str(value))
    return texts
