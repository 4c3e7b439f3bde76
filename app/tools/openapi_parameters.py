"""An operation's parameters and JSON body members -> a tool's parameters (app/tools/openapi.py).

Only what a tool parameter expresses is taken: scalars and arrays of scalars, in the path, the
query, a header or a JSON object body. Anything else, including a field of the wrong type,
skips the operation with the reason.
"""

from __future__ import annotations

from typing import Any

from app.tools.openapi_fields import NAME, kind, scalar_texts, short, text_field
from app.tools.openapi_refs import Resolver, Skip

_SCALARS = ("string", "integer", "number", "boolean")
_PLACES = ("path", "query", "header")


def parameter_members(
    resolver: Resolver, path_item: dict[str, Any], operation: dict[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """The tool parameters of the path item's and the operation's `parameters`, and which
    are required (the operation's replace the path item's of the same name and place)."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in _parameters(resolver, path_item, operation):
        name, where = parameter["name"], parameter["in"]
        if where == "cookie":
            raise Skip(f"the cookie parameter '{short(name)}' cannot be sent")
        if where not in _PLACES:
            raise Skip(f"parameter '{short(name)}' has no valid 'in'")
        _add(properties, name, parameter.get("schema") or {}, where)
        description = text_field(parameter, "description", f"parameter '{name}':")
        if description:
            properties[name].setdefault("description", description[:4096])
        if (parameter.get("required") is True or where == "path") and name not in required:
            required.append(name)
    return properties, required


def _parameters(
    resolver: Resolver, path_item: dict[str, Any], operation: dict[str, Any]
) -> list[dict[str, Any]]:
    listed: list[Any] = []
    for owner, whose in ((path_item, "the path's"), (operation, "its")):
        parameters = owner.get("parameters")
        if parameters is None:
            continue
        if not isinstance(parameters, list):
            raise Skip(f"{whose} 'parameters' is {kind(parameters)}, not a list")
        listed += parameters
    by_place: dict[tuple[str, str], dict[str, Any]] = {}
    for index, parameter in enumerate(resolver.resolve(listed)):
        if not isinstance(parameter, dict):
            raise Skip(f"parameter {index} is {kind(parameter)}, not an object")
        name, where = parameter.get("name"), parameter.get("in")
        if not isinstance(name, str) or not isinstance(where, str):
            raise Skip(f"parameter {index} has no 'name' and 'in' strings")
        by_place[(name, where)] = parameter
    return list(by_place.values())


def body_members(
    resolver: Resolver,
    operation: dict[str, Any],
    properties: dict[str, Any],
    required: list[str],
) -> None:
    """The members of the operation's JSON object body, added to `properties`."""
    if operation.get("requestBody") is None:
        return
    body = resolver.resolve(operation["requestBody"])
    if not isinstance(body, dict):
        raise Skip(f"its requestBody is {kind(body)}, not an object")
    content = body.get("content") or {}
    if not isinstance(content, dict):
        raise Skip(f"its request body's 'content' is {kind(content)}, not an object")
    json_type = next((t for t in content if t.split(";")[0].strip() == "application/json"), None)
    if json_type is None:
        kinds = ", ".join(sorted(content)) or "none"
        raise Skip(f"the request body is not JSON ({short(kinds)})")
    media = content[json_type] or {}
    if not isinstance(media, dict):
        raise Skip(f"its JSON body's media type object is {kind(media)}, not an object")
    schema = media.get("schema") or {}
    if not isinstance(schema, dict):
        raise Skip(f"the JSON body's schema is {kind(schema)}, not an object")
    for keyword in ("oneOf", "anyOf", "allOf"):
        if keyword in schema:
            raise Skip(f"the JSON body uses {keyword}, which tool parameters cannot express")
    if schema.get("type", "object") != "object" or not isinstance(schema.get("properties"), dict):
        raise Skip("the JSON body is not an object with named members")
    names = schema.get("required") or []
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise Skip("the JSON body's 'required' is not a list of member names")
    body_required = set(names) if body.get("required") is True else set()
    for name, member in schema["properties"].items():
        _add(properties, name, member, "body")
        if name in body_required:
            required.append(name)


def _add(properties: dict[str, Any], name: str, schema: Any, where: str) -> None:
    if not NAME.fullmatch(name):
        raise Skip(
            f"the {where} parameter '{short(name)}' is not a name tools accept ([a-zA-Z0-9_-])"
        )
    if name in properties:
        raise Skip(f"'{name}' is both a {properties[name]['in']} and a {where} parameter")
    properties[name] = {**_parameter(name, schema), "in": where}


def _parameter(name: str, schema: Any) -> dict[str, Any]:
    """A schema as a tool parameter: scalars, and arrays of scalars."""
    if not isinstance(schema, dict):
        raise Skip(f"'{name}' has no schema")
    for keyword in ("anyOf", "oneOf"):  # `X or null` (3.1's optional values) is X
        choices = schema.get(keyword)
        if isinstance(choices, list):
            real = [c for c in choices if not (isinstance(c, dict) and c.get("type") == "null")]
            if len(real) == 1 and isinstance(real[0], dict):
                schema = {**{k: v for k, v in schema.items() if k != keyword}, **real[0]}
    for keyword in ("oneOf", "anyOf", "allOf", "not"):
        if keyword in schema:
            raise Skip(f"'{name}' uses {keyword}, which tool parameters cannot express")
    out: dict[str, Any] = {}
    description = schema.get("description")
    if isinstance(description, str) and description:
        out["description"] = description[:4096]
    scalar = _type(schema)
    if scalar in _SCALARS:
        out["type"] = scalar
        enum = scalar_texts(schema.get("enum"), f"the enum of '{name}'")[:256]
        if scalar == "string" and enum:
            out["enum"] = enum
        return out
    if scalar == "array":
        return {**out, **_array(name, schema)}
    what = "an object" if scalar == "object" else "untyped"
    raise Skip(f"'{name}' is {what}, which tool parameters cannot express")


def _type(schema: dict[str, Any]) -> str | None:
    """The schema's one type (3.1's `["string", "null"]` is a string); None for anything else."""
    found = schema.get("type")
    if isinstance(found, list):
        kinds = [k for k in found if k != "null"]
        found = kinds[0] if len(kinds) == 1 else None
    return found if isinstance(found, str) else None


def _array(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    items = schema.get("items") or {}
    item_kind = _type(items) if isinstance(items, dict) else None
    if item_kind not in _SCALARS:
        raise Skip(f"'{name}' is an array of {short(item_kind or 'untyped items')}")
    out: dict[str, Any] = {"type": "array", "items": {"type": item_kind}}
    enum = scalar_texts(items.get("enum"), f"the item enum of '{name}'")[:256]
    if item_kind == "string" and enum:
        out["items"]["enum"] = enum
    for source, target in (("minItems", "min_items"), ("maxItems", "max_items")):
        value = schema.get(source)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 1000:
            out[target] = value
    return out
