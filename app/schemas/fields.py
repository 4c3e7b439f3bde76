"""Field types shared by every schema and by the MCP server configuration: one definition each."""

from __future__ import annotations

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


def too_deep(value: Any) -> bool:
    """JSON nested deeper than MAX_JSON_DEPTH (walked iteratively: never a recursion error)."""
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        current, depth = pending.pop()
        if isinstance(current, dict | list):
            if depth > MAX_JSON_DEPTH:
                return True
            children = current.values() if isinstance(current, dict) else current
            pending.extend((child, depth + 1) for child in children)
    return False


def _within_depth(value: Any) -> Any:
    if too_deep(value):
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
    return value


# Free-form JSON a client sends (message contents, tool arguments): at most MAX_JSON_DEPTH levels
# of objects and arrays, so that every copy of it (model traffic, answers, run records, BSON's
# 100 levels) can be written.
BoundedJSON = Annotated[Any, AfterValidator(_within_depth)]


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
