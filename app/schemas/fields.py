"""Field types shared by every schema and by the MCP server configuration: one definition each.

Also the one rule for function names: `name_problems` says what each provider refuses in a name
and `safe_tool_name` makes one every provider takes (the OpenAPI importer's tool names, MCP
tools' `{server}__{tool}`). They live here, below `app/tools/`, because the schemas' `Name`
field is the same pattern.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    StringConstraints,
    ValidationError,
)

# The function names OpenAI and Anthropic accept; every id and name here follows it.
NAME_PATTERN = r"^[a-zA-Z0-9_-]{1,64}$"
MAX_NAME = 64
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


# The tool formats a stored tool can be read in (`?format=`; app/tools/providers.py shapes them).
Provider = Literal["openai", "openai-strict", "openai-responses", "anthropic", "gemini"]

_NAME = re.compile(NAME_PATTERN)
_UNSAFE_NAME_RUN = re.compile(r"[^a-zA-Z0-9_-]+")


def _starts_as_gemini_wants(name: str) -> bool:
    return name[:1].isascii() and (name[:1].isalpha() or name[:1] == "_")


def name_problems(name: str) -> dict[str, list[str]]:
    """What each provider refuses in `name` as a function name, by provider; empty when every
    provider takes it. Gemini also wants a letter or an underscore first."""
    problems: dict[str, list[str]] = {}
    if not _NAME.fullmatch(name):  # not .match: `$` also matches before a final newline
        reason = f"function name '{name}' must be 1-{MAX_NAME} letters, digits, '_' or '-'"
        problems = {provider: [reason] for provider in get_args(Provider)}
    if not _starts_as_gemini_wants(name):
        problems.setdefault("gemini", []).append(
            f"function name '{name}' must start with a letter or an underscore"
        )
    return problems


def safe_tool_name(text: str, *, prefix: str = "") -> str:
    """`prefix` + `text` as a function name every provider takes: each run of other characters
    becomes `_` (and none at either end of `text`), an `_` goes first if nothing else would
    start the name as Gemini wants, and a name over 64 characters keeps its start and a digest
    of the whole, so two long names stay distinct. `prefix` (an MCP server's `{server}__`, an
    import's `shop_`) is kept as given: a tool name's leading part is the caller's to choose."""
    name = prefix + (_UNSAFE_NAME_RUN.sub("_", text).strip("_") or "tool")
    if not prefix and not _starts_as_gemini_wants(name):
        name = f"_{name}"
    if len(name) > MAX_NAME:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        name = f"{name[: MAX_NAME - len(digest) - 1]}_{digest}"
    return name


MAX_JSON_VALUES = 100_000
MAX_JSON_KEY_CHARS = 1024


def json_problem(value: Any, *, max_depth: int = MAX_JSON_DEPTH) -> str | None:
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
            if depth > max_depth:
                return f"nested deeper than {max_depth} levels"
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
