"""An operation's parameters and body members -> a tool's parameters (app/tools/openapi.py).

Path, query and header parameters keep their schema (app/tools/openapi_schema.py) and their
`style`/`explode`; the body is a JSON object, a form (`application/x-www-form-urlencoded`) or
multipart form data without files, its members top-level parameters (`in: body`), required
when the schema says so (a body is always sent). An optional part that cannot be expressed is
left out with a note (`converter.notes`); a required one, or a field of the wrong type, skips
the operation with the reason.
"""

from __future__ import annotations

from typing import Any

from app.tools.openapi_fields import NAME, kind, short, text_field
from app.tools.openapi_refs import Resolver, Skip
from app.tools.openapi_schema import SchemaConverter

MAX_PARAMETERS = 64  # a tool's top-level parameters
_PLACES = ("path", "query", "header")
_STYLES = {
    "query": ("form", "spaceDelimited", "pipeDelimited", "deepObject"),
    "path": ("simple",),
    "header": ("simple",),
}
_BODY_TYPES = (
    ("application/json", "json"),
    ("application/x-www-form-urlencoded", "form"),
    ("multipart/form-data", "multipart"),
)


class Members:
    """The tool parameters being built for one operation."""

    def __init__(self, converter: SchemaConverter) -> None:
        self.converter = converter
        self.properties: dict[str, Any] = {}
        self.required: list[str] = []
        self.body_type: str | None = None

    def add(self, name: str, schema: dict[str, Any], where: str, required: bool) -> None:
        """One top-level parameter; an optional one that does not fit is left out (a note)."""
        try:
            if not NAME.fullmatch(name):
                raise Skip(f"the {where} parameter '{short(name)}' is not a name tools accept")
            if name in self.properties:
                raise Skip(f"'{name}' is both a {self.properties[name]['in']} and a {where} one")
            if len(self.properties) >= MAX_PARAMETERS:
                raise Skip(f"'{short(name)}' is past the {MAX_PARAMETERS} parameters a tool has")
        except Skip as why:
            if required:
                raise
            self.converter.notes.append(f"{why}: left out (optional)")
            return
        self.properties[name] = {**schema, "in": where}
        if required and name not in self.required:
            self.required.append(name)

    def drop(self, names: set[str], why: str) -> None:
        """Parameters the tool fills itself (a credential): not the model's to give."""
        for name in [
            n for n, p in self.properties.items() if n.lower() in names and p["in"] != "body"
        ]:
            del self.properties[name]
            self.required = [r for r in self.required if r != name]
            self.converter.notes.append(f"'{name}' is {why}: left out")


def parameter_members(
    members: Members, resolver: Resolver, path_item: dict[str, Any], operation: dict[str, Any]
) -> None:
    """The path item's and the operation's `parameters` (the operation's replace the path
    item's of the same name and place)."""
    for parameter in _parameters(resolver, path_item, operation):
        name, where = parameter["name"], parameter["in"]
        required = parameter.get("required") is True or where == "path"
        try:
            schema = _parameter_schema(members.converter, parameter, name, where)
        except Skip as why:
            if required:
                raise
            members.converter.notes.append(f"{why}: left out (optional)")
            continue
        members.add(name, schema, where, required)


def _parameter_schema(
    converter: SchemaConverter, parameter: dict[str, Any], name: str, where: str
) -> dict[str, Any]:
    if where == "cookie":
        raise Skip(f"the cookie parameter '{short(name)}' cannot be sent")
    if where not in _PLACES:
        raise Skip(f"parameter '{short(name)}' has no valid 'in'")
    schema = dict(converter.convert(parameter.get("schema") or {}, name))
    description = text_field(parameter, "description", f"parameter '{name}':")
    if description and "description" not in schema:
        schema["description"] = description[:4096]
    style, explode = parameter.get("style"), parameter.get("explode")
    if style is not None:
        if style not in _STYLES[where]:
            raise Skip(f"the {where} parameter '{short(name)}' has the style {short(str(style))}")
        schema["style"] = style
    if isinstance(explode, bool):
        schema["explode"] = explode
    return schema


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
    for index, parameter in enumerate(listed):
        if isinstance(parameter, dict) and isinstance(parameter.get("$ref"), str):
            parameter = resolver.follow(parameter["$ref"])
        if not isinstance(parameter, dict):
            raise Skip(f"parameter {index} is {kind(parameter)}, not an object")
        name, where = parameter.get("name"), parameter.get("in")
        if not isinstance(name, str) or not isinstance(where, str):
            raise Skip(f"parameter {index} has no 'name' and 'in' strings")
        by_place[(name, where)] = parameter
    return list(by_place.values())


def body_members(members: Members, resolver: Resolver, operation: dict[str, Any]) -> None:
    """The members of the operation's body (JSON object, form or multipart), as parameters."""
    body = operation.get("requestBody")
    if body is None:
        return
    if isinstance(body, dict) and isinstance(body.get("$ref"), str):
        body = resolver.follow(body["$ref"])
    if not isinstance(body, dict):
        raise Skip(f"its requestBody is {kind(body)}, not an object")
    content = body.get("content") or {}
    if not isinstance(content, dict):
        raise Skip(f"its request body's 'content' is {kind(content)}, not an object")
    chosen = _media_type(content)
    if chosen is None:
        kinds = ", ".join(sorted(content)) or "none"
        raise Skip(f"the request body is not JSON, a form or multipart ({short(kinds)})")
    media_type, body_type = chosen
    media = content[media_type] or {}
    if not isinstance(media, dict):
        raise Skip(f"its body's media type object is {kind(media)}, not an object")
    schema = media.get("schema") or {}
    if not isinstance(schema, dict):
        raise Skip(f"the body's schema is {kind(schema)}, not an object")
    root = _object(members.converter.convert(schema, ""))
    members.body_type = body_type
    required = set(root.get("required") or []) | _narrowed(resolver, schema)
    for name, member in root["properties"].items():
        if body_type == "multipart" and _is_file(member):
            if name in required:
                raise Skip(f"the multipart member '{short(name)}' is a file")
            members.converter.notes.append(f"the file '{short(name)}' is left out (optional)")
            continue
        members.add(name, member, "body", name in required)


def _media_type(content: dict[str, Any]) -> tuple[str, str] | None:
    bare = {t.split(";")[0].strip().lower(): t for t in content}
    for wanted, body_type in _BODY_TYPES:
        if wanted in bare:
            return bare[wanted], body_type
    json_like = next((t for b, t in bare.items() if b.endswith("+json") and "patch" not in b), None)
    return (json_like, "json") if json_like else None


def _object(schema: dict[str, Any]) -> dict[str, Any]:
    """The body schema as one object with named members (`allOf` of objects merged)."""
    properties = dict(schema.get("properties") or {})
    required = list(schema.get("required") or [])
    for index, part in enumerate(schema.get("allOf") or []):
        # a part with members, or one that only narrows them (`{"required": ["title"]}`)
        members = part.get("properties", {})
        if part.get("type") not in (None, "object") or "anyOf" in part or "oneOf" in part:
            raise Skip(f"the body is an allOf whose part {index} is {_shape(part)}, not an object")
        properties.update(members)
        required += part.get("required") or []
    for keyword in ("oneOf", "anyOf"):
        choices = schema.get(keyword)
        if isinstance(choices, list) and len(choices) == 1:  # no choice at all: that schema
            only = _object(choices[0])
            properties.update(only["properties"])
            required += only["required"]
        elif keyword in schema:
            count = len(schema[keyword])
            raise Skip(f"the body is a choice ({keyword} of {count} schemas), not one object")
    if not properties and schema.get("type") not in (None, "object"):
        raise Skip(f"the body is {_shape(schema)}, not an object with named members")
    return {"properties": properties, "required": [r for r in required if r in properties]}


def _narrowed(resolver: Resolver, schema: dict[str, Any]) -> set[str]:
    """Members an `allOf` part of the body only requires (`{"required": ["title"]}`: the tool
    schema keeps `required` beside the members it names, so such a part converts to nothing)."""
    if isinstance(schema.get("$ref"), str):
        try:
            schema = resolver.follow(schema["$ref"])
        except Skip:
            return set()
    parts = schema.get("allOf") if isinstance(schema, dict) else None
    names: set[str] = set()
    for part in parts if isinstance(parts, list) else []:
        if isinstance(part, dict) and "properties" not in part and "$ref" not in part:
            listed = part.get("required")
            if isinstance(listed, list):
                names.update(n for n in listed if isinstance(n, str))
    return names


def _shape(schema: dict[str, Any]) -> str:
    """What a converted schema holds, for a reason: `an array`, `a string`, `a schema with no
    type`."""
    types = schema.get("type")
    named = types if isinstance(types, str) else "/".join(types) if types else ""
    if "anyOf" in schema or "oneOf" in schema:
        return "a choice"
    if not named:
        return "a schema with no type or members"
    return f"{'an' if named[0] in 'aeiou' else 'a'} {named}"


def _is_file(schema: Any) -> bool:
    return isinstance(schema, dict) and (
        schema.get("format") in ("binary", "base64") or schema.get("type") == "file"
    )
