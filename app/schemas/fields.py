"""Field types shared by every schema and by the MCP server configuration: one definition each."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    StringConstraints,
    ValidationError,
)

NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"
TAG_PATTERN = r"^[a-zA-Z0-9_.:-]{1,64}$"
# No double underscore and no trailing underscore: `{server}__{tool}` must split one way.
SERVER_NAME_PATTERN = r"^[a-zA-Z0-9-]+(_[a-zA-Z0-9-]+)*$"
SERVER_NAME_MAX = 32
# An HTTP field name (RFC 9110 token).
HEADER_NAME_PATTERN = r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$"
# A field value without control characters (a tab is allowed, as RFC 9110 allows it).
HEADER_VALUE_PATTERN = r"^[^\x00-\x08\x0a-\x1f\x7f]*$"
HEADER_VALUE_MAX = 8192
MAX_JSON_DEPTH = 32

Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
Tag = Annotated[str, StringConstraints(pattern=TAG_PATTERN)]
Description = Annotated[str, StringConstraints(max_length=4096)]
ServerName = Annotated[
    str, StringConstraints(pattern=SERVER_NAME_PATTERN, min_length=1, max_length=SERVER_NAME_MAX)
]
HeaderName = Annotated[str, StringConstraints(pattern=HEADER_NAME_PATTERN)]
HeaderValue = Annotated[
    str, StringConstraints(pattern=HEADER_VALUE_PATTERN, max_length=HEADER_VALUE_MAX)
]


MAX_JSON_VALUES = 100_000
MAX_JSON_KEY_CHARS = 1024


def json_problem(value: Any) -> str | None:
    """The one input gate for free-form JSON from a caller or a model (message parts, and tool
    arguments on every entry point: `/chat`, invoke, `/mcp`, the model's calls): why it cannot
    be taken, or None. What it refuses, no copy of it could be written whole (orjson stops near
    255 levels, BSON at 100, and a walk must stay bounded): nesting past MAX_JSON_DEPTH levels,
    more than MAX_JSON_VALUES values, keys longer than MAX_JSON_KEY_CHARS, numbers that are not
    finite. Integers past 64 bits and NUL in keys are valid JSON a tool may take: run records
    keep them reduced (`app/repositories/storable.py`). Walked iteratively, once per value."""
    pending: list[tuple[Any, int]] = [(value, 1)]
    seen = 0
    while pending:
        current, depth = pending.pop()
        seen += 1
        if seen > MAX_JSON_VALUES:
            return f"more than {MAX_JSON_VALUES} values"
        if isinstance(current, dict | list):
            if depth > MAX_JSON_DEPTH:
                return f"nested deeper than {MAX_JSON_DEPTH} levels"
            if isinstance(current, list):
                pending.extend((child, depth + 1) for child in current)
                continue
            for key, child in current.items():
                if len(key) > MAX_JSON_KEY_CHARS:
                    return f"an object key is longer than {MAX_JSON_KEY_CHARS} characters"
                pending.append((child, depth + 1))
        elif isinstance(current, float) and not math.isfinite(current):
            return "a number that is not finite"
    return None


def arguments_problem(arguments: dict[str, Any]) -> str | None:
    """The gate for a tool call's arguments: each argument's value, as `json_problem` takes it
    (so an argument may nest MAX_JSON_DEPTH levels, however the call reached us)."""
    if len(arguments) > MAX_JSON_VALUES:
        return f"more than {MAX_JSON_VALUES} values"
    for name, value in arguments.items():
        if len(name) > MAX_JSON_KEY_CHARS:
            return f"an argument name is longer than {MAX_JSON_KEY_CHARS} characters"
        problem = json_problem(value)
        if problem is not None:
            return problem
    return None


def _through_the_gate(value: Any) -> Any:
    problem = json_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


# Free-form JSON a client sends (message contents, tool arguments): at most MAX_JSON_DEPTH levels
# of objects and arrays, so that every copy of it (model traffic, answers, run records, BSON's
# 100 levels) can be written.
BoundedJSON = Annotated[Any, AfterValidator(_through_the_gate)]


def problem_lines(exc: ValidationError) -> list[str]:
    """One `field.path: message` line per problem; messages name fields, never input values."""
    return [f"{'.'.join(map(str, e['loc'])) or 'document'}: {e['msg']}" for e in exc.errors()]


class ClientModel(BaseModel):
    """What clients send: unknown fields are rejected, types are not coerced."""

    model_config = ConfigDict(extra="forbid", strict=True)


def _whole_float_as_int(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


# JSON Schema's `integer` includes 3.0; strict models refuse floats, so a whole one is taken.
# The bounds go before the validator, or the schema would not state them.
WholeNumber = BeforeValidator(_whole_float_as_int)
