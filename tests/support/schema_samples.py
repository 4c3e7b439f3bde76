"""Arguments generated from the JSON Schema a model sees (a tool's `json_parameters` subset):
one valid value per schema, the way a careful model would fill it in."""

from __future__ import annotations

import re._parser as _parser
from typing import Any

import jsonschema_rs

_FORMATS = {
    "uuid": "123e4567-e89b-12d3-a456-426614174000",
    "date-time": "2024-01-02T03:04:05Z",
    "date": "2024-01-02",
    "time": "03:04:05Z",
    "email": "someone@example.com",
    "uri": "https://example.com/a",
    "url": "https://example.com/a",
    "hostname": "example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "byte": "aGVsbG8=",
    "duration": "P1D",
    "idn-email": "someone@example.com",
    "idn-hostname": "example.com",
    "iri": "https://example.com/a",
    "iri-reference": "/a",
    "uri-reference": "/a",
    "uri-template": "https://example.com/{a}",
    "json-pointer": "/a",
    "relative-json-pointer": "0/a",
    "regex": "^a$",
}


def sample(schema: Any, defs: dict[str, Any] | None = None, depth: int = 0) -> Any:
    """A value `schema` accepts (required members only, below the top level)."""
    defs = defs or {}
    if not isinstance(schema, dict) or depth > 30:
        return "x"
    if "$ref" in schema:
        return sample(defs.get(schema["$ref"].removeprefix("#/$defs/"), {}), defs, depth + 1)
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for keyword in ("anyOf", "oneOf"):
        if schema.get(keyword):
            return _choice(schema, keyword, defs, depth)
    if schema.get("allOf"):
        return sample(_merged(schema, defs), defs, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "string"
    return _typed(kind, schema, defs, depth)


def _choice(schema: dict[str, Any], keyword: str, defs: dict[str, Any], depth: int) -> Any:
    """The first choice's sample that the whole schema accepts (a `oneOf` sample that two
    choices accept is not one), else the first choice's; a choice's optional members are
    tried too, as they may tell overlapping choices apart (a model would send them)."""
    whole = {**schema, "$defs": defs} if defs else schema
    samples = [sample(choice, defs, depth + 1) for choice in schema[keyword]]
    samples += [
        sample({**choice, "required": list(choice["properties"])}, defs, depth + 1)
        for choice in schema[keyword]
        if isinstance(choice, dict) and isinstance(choice.get("properties"), dict)
    ]
    for value in samples:
        try:
            if jsonschema_rs.validator_for(whole).is_valid(value):
                return value
        except ValueError:  # a schema the validator cannot compile: the first will do
            break
    return samples[0]


def _merged(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """An `allOf` as one schema: its parts' keywords together, object members united."""
    merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
    for part in schema["allOf"]:
        while isinstance(part, dict) and "$ref" in part:
            part = defs.get(part["$ref"].removeprefix("#/$defs/"), {})
        if not isinstance(part, dict):
            continue
        if "allOf" in part:
            part = _merged(part, defs)
        for key, value in part.items():
            if key == "properties":
                merged["properties"] = {**merged.get("properties", {}), **value}
            elif key == "required":
                merged["required"] = [*merged.get("required", []), *value]
            else:
                merged.setdefault(key, value)
    return merged


def _typed(kind: str, schema: dict[str, Any], defs: dict[str, Any], depth: int) -> Any:
    if kind == "object":
        required = set(schema.get("required") or [])
        return {
            name: sample(sub, defs, depth + 1)
            for name, sub in (schema.get("properties") or {}).items()
            if name in required
        }
    if kind == "array":
        count = max(schema.get("minItems", 1), 1)
        return [sample(schema.get("items") or {"type": "string"}, defs, depth + 1)] * count
    if kind in ("integer", "number"):
        return _number(kind, schema)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return _string(schema)


def _number(kind: str, schema: dict[str, Any]) -> int | float:
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    high = schema.get("maximum", schema.get("exclusiveMaximum"))
    value = 1 if low is None else low + (1 if "exclusiveMinimum" in schema else 0)
    if high is not None and value > high:
        value = high
    step = schema.get("multipleOf")
    if step:
        value = step * max(1, round(value / step))
    return int(value) if kind == "integer" else value


def _string(schema: dict[str, Any]) -> str:
    low = schema.get("minLength", 0)
    high = schema.get("maxLength")
    if schema.get("pattern"):
        return regex_sample(schema["pattern"], low)
    text = _FORMATS.get(schema.get("format", ""), "abc").ljust(low, "a")
    return text[:high] if high is not None else text


_CATEGORY = {"CATEGORY_DIGIT": "0", "CATEGORY_WORD": "a", "CATEGORY_SPACE": " "}


def regex_sample(pattern: str, min_length: int = 0) -> str:
    """A short string `pattern` matches in full (simple regexes: literals, classes, repeats,
    groups, alternatives), grown to `min_length` where a repeat allows."""
    parsed = _parser.parse(pattern)
    text = _emit(list(parsed), max(min_length, 1))
    return text


def _emit(items: list[Any], want: int) -> str:
    out = ""
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            out += chr(arg)
        elif name == "NOT_LITERAL":
            out += "a" if chr(arg) != "a" else "b"
        elif name == "ANY":
            out += "a"
        elif name == "IN":
            out += _in(arg)
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, high, sub = arg
            one = _emit(list(sub), 1)
            count = low
            while count < high and len(out) + len(one) * count < want and one:
                count += 1
            out += one * count
        elif name == "SUBPATTERN":
            out += _emit(list(arg[-1]), want - len(out))
        elif name == "BRANCH":
            out += _emit(list(arg[1][0]), want - len(out))
    return out


def _in(members: list[Any]) -> str:
    negated = any(str(op) == "NEGATE" for op, _ in members)
    for op, arg in members:
        name = str(op)
        if name == "LITERAL" and not negated:
            return chr(arg)
        if name == "RANGE" and not negated:
            return chr(arg[0])
        if name == "CATEGORY" and not negated:
            return _CATEGORY.get(str(arg), "a")
    return "~" if negated else "a"
