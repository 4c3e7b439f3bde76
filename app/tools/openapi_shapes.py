"""Converted schemas (app/tools/openapi_schema.py) reshaped as a tool needs them: `allOf` parts
merged member by member (`merge_schemas`), `required` names without a member given one
(`tidied`), and the stated order in which a tool too large is cut (`SIZE_CUTS`). Converted
schemas share their `$ref` targets: each function here copies, never changes its input, and
rewrites each shared part once."""

from __future__ import annotations

from typing import Any

from app.tools.openapi_schema import loose, schema_types
from app.tools.schema import PROPERTY_NAME

_LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties")
_UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties")


def merge_schemas(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Two converted schemas that must both hold (`allOf`), as one: members merged member by
    member (a part that narrows `from` to `{"required": ["email"]}` keeps `from`'s members),
    every `required` kept, types and enums intersected, the tighter of two bounds; otherwise
    the first part's keyword stays. Neither input is changed (converted schemas are shared)."""
    merged = dict(first)
    for key, value in second.items():
        if key not in merged:
            merged[key] = value
        elif key == "properties" and isinstance(value, dict):
            mine = merged["properties"] if isinstance(merged["properties"], dict) else {}
            merged["properties"] = {
                **mine,
                **{
                    name: merge_schemas(mine[name], sub)
                    if isinstance(mine.get(name), dict) and isinstance(sub, dict)
                    else sub
                    for name, sub in value.items()
                },
            }
        elif key == "required" and isinstance(value, list):
            merged["required"] = list(dict.fromkeys([*merged["required"], *value]))
        elif key == "type":
            both = [t for t in schema_types(merged["type"]) if t in schema_types(value)]
            if both:
                merged["type"] = both[0] if len(both) == 1 else both
        elif key == "enum" and isinstance(value, list):
            both = [v for v in merged["enum"] if v in value]
            merged["enum"] = both or merged["enum"]
        elif key in _LOWER_BOUNDS and _is_number(value) and _is_number(merged[key]):
            merged[key] = max(merged[key], value)
        elif key in _UPPER_BOUNDS and _is_number(value) and _is_number(merged[key]):
            merged[key] = min(merged[key], value)
        elif key == "allOf" and isinstance(value, list):
            merged["allOf"] = [*merged["allOf"], *value]
    return merged


def tidied(schema: dict[str, Any]) -> dict[str, Any]:
    """A converted schema as a tool holds it: a `required` name that no member of the same
    schema has (a narrowing `allOf` part left unmerged, a `oneOf` branch that only requires)
    gets a member that takes any value, `{}`, as a tool's `required` must name members. Shared
    parts stay shared."""
    done: dict[int, Any] = {}

    def walk(node: Any) -> Any:
        if not isinstance(node, dict | list):
            return node
        key = id(node)
        if key not in done:
            if isinstance(node, list):
                done[key] = [walk(item) for item in node]
            else:
                values = ("enum", "const", "default", "examples")
                out = {k: v if k in values else walk(v) for k, v in node.items()}
                listed = out.get("required")
                if isinstance(listed, list) and isinstance(out.get("properties", {}), dict):
                    members = dict(out.get("properties") or {})
                    for name in listed:  # `{}` takes any value: the same rule, stated as a tool can
                        if name not in members and PROPERTY_NAME.fullmatch(name):
                            members[name] = {}
                    kept = [n for n in listed if n in members]
                    if kept:
                        out["properties"], out["required"] = members, kept
                    else:
                        del out["required"]
                done[key] = out
        return done[key]

    return walk(schema)  # type: ignore[no-any-return]


def _rewritten(schema: dict[str, Any], change: Any) -> dict[str, Any]:
    """`schema` with `change(node, top)` applied to every subschema, children first; each shared
    part is rewritten once and stays shared. `top` is true for the parameters' own members."""
    done: dict[tuple[int, bool], Any] = {}

    def walk(node: Any, top: bool) -> Any:
        if isinstance(node, list):
            return [walk(item, False) for item in node]
        if not isinstance(node, dict):
            return node
        key = (id(node), top)
        if key not in done:
            out: dict[str, Any] = {}
            for name, value in node.items():
                if name == "properties" and isinstance(value, dict):
                    out[name] = {n: walk(sub, False) for n, sub in value.items()}
                elif name in ("items", "additionalProperties", "anyOf", "oneOf", "allOf"):
                    out[name] = walk(value, False)
                else:
                    out[name] = value
            done[key] = change(out, top)
        return done[key]

    properties = schema.get("properties") or {}
    return {**schema, "properties": {n: walk(sub, True) for n, sub in properties.items()}}


def _without_descriptions(node: dict[str, Any], top: bool) -> dict[str, Any]:
    if top:
        return node
    return {k: v for k, v in node.items() if k not in ("description", "title")}


def _without_examples(node: dict[str, Any], top: bool) -> dict[str, Any]:
    return {k: v for k, v in node.items() if k not in ("examples", "example", "default")}


def _without_optional_detail(node: dict[str, Any], top: bool) -> dict[str, Any]:
    """Optional members shown by their type alone; `oneOf` as `anyOf` (loosened choices may
    overlap)."""
    if "oneOf" in node and "anyOf" not in node:
        node = {**{k: v for k, v in node.items() if k != "oneOf"}, "anyOf": node["oneOf"]}
    properties = node.get("properties")
    if not isinstance(properties, dict):
        return node
    required = node.get("required") or []
    shown = {
        name: sub if name in required or not isinstance(sub, dict) else loose(sub)
        for name, sub in properties.items()
    }
    return {**node, "properties": shown}


def _unchanged(schema: dict[str, Any]) -> dict[str, Any]:
    return schema


# What is cut, in turn, from a tool larger than a tool holds (app/tools/openapi.py).
SIZE_CUTS: tuple[tuple[str, Any], ...] = (
    ("nothing", _unchanged),
    ("descriptions", lambda schema: _rewritten(schema, _without_descriptions)),
    ("examples", lambda schema: _rewritten(schema, _without_examples)),
    ("optional members' detail", lambda schema: _rewritten(schema, _without_optional_detail)),
)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)
