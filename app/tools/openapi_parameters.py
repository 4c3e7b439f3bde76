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

from app.http.outbound import reserved_header_problems
from app.tools.openapi_fields import NAME, kind, short, text_field
from app.tools.openapi_refs import Resolver, Skip
from app.tools.openapi_schema import SchemaConverter
from app.tools.openapi_shapes import merge_schemas, tidied
from app.tools.schema import compiled

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
    """The tool parameters being built for one operation. Each place keeps its own names: a
    mapped credential fills only its own header (or query parameter), so a path parameter named
    `authorization` stays; framing headers (`Content-Type`, `Content-Length`, `Host`, ...) are
    the HTTP client's, never parameters."""

    def __init__(
        self,
        converter: SchemaConverter,
        *,
        credential_headers: frozenset[str] = frozenset(),
        credential_query: frozenset[str] = frozenset(),
    ) -> None:
        self.converter = converter
        self.properties: dict[str, Any] = {}
        self.required: list[str] = []
        self.body_type: str | None = None
        self.content_type: str | None = None  # a JSON media type other than application/json
        self.body_parameter: str | None = None  # the parameter that is the whole body
        self._credential_headers = credential_headers  # lower case
        self._credential_query = credential_query

    def add(self, name: str, schema: dict[str, Any], where: str, required: bool) -> None:
        """One top-level parameter; an optional one that does not fit is left out (a note)."""
        if self._filled(name, where):
            return
        try:
            if not NAME.fullmatch(name):
                raise Skip(f"the {where} parameter '{short(name)}' is not a name tools accept")
            if name in self.properties or name in self._credential_query:
                other = self.properties[name]["in"] if name in self.properties else "query"
                raise Skip(f"'{name}' is both a {other} and a {where} one")
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

    def _filled(self, name: str, where: str) -> bool:
        """A parameter the tool fills itself: the mapped credential's own header or query
        parameter, or a header the HTTP client writes (a note says so)."""
        if where == "header" and name.lower() in self._credential_headers:
            why = "filled by the mapped credential"
        elif where == "query" and name in self._credential_query:
            why = "filled by the mapped credential"
        elif where == "header" and framing_header(name):
            why = "a header the HTTP client sets"
        else:
            return False
        self.converter.notes.append(f"'{name}' is {why}: left out")
        return True


def framing_header(name: str) -> bool:
    """A header only the HTTP client writes (`Host`, `Content-Length`, ...; app/http/outbound.py),
    or `Content-Type`, which follows from the body (no model may set it: app/tools/rules.py)."""
    return name.lower() == "content-type" or bool(reserved_header_problems([name]))


def parameter_members(
    members: Members, resolver: Resolver, path_item: dict[str, Any], operation: dict[str, Any]
) -> None:
    """The path item's and the operation's `parameters` (the operation's replace the path
    item's of the same name and place); path parameters first, as they are always required."""
    listed = _parameters(resolver, path_item, operation)
    for parameter in sorted(listed, key=lambda p: p["in"] != "path"):
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
    """The operation's body as parameters: the members of a JSON object, a form or multipart
    form data each a parameter (`in: body`), or, for a body that is not one object with named
    members (an array, a choice, a free-form object), one parameter that is the whole body."""
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
    converted = members.converter.convert(schema, "")
    members.body_type = body_type
    bare = media_type.split(";")[0].strip().lower()
    if body_type == "json" and bare not in ("application/json", "*/*", "application/*"):
        members.content_type = bare  # `application/merge-patch+json`: sent as it is named
    try:
        root: dict[str, Any] | None = _object(converted)
    except Skip:
        if body_type != "json" or "allOf" in converted:  # a form has members; parts disagree
            raise
        root = None
    if root is None or (body_type == "json" and not root["properties"]):
        _whole_body(members, converted, body.get("required") is True)
        return
    required = set(root.get("required") or []) | _narrowed(resolver, schema)
    encoding = media.get("encoding") if body_type == "form" else None
    for name, member in root["properties"].items():
        if body_type == "multipart" and _is_file(member):
            if name in required:
                raise Skip(f"the multipart member '{short(name)}' is a file")
            members.converter.notes.append(f"the file '{short(name)}' is left out (optional)")
            continue
        members.add(name, {**member, **_form_style(encoding, name)}, "body", name in required)
    if "allOf" in converted:
        _check_examples(members, _examples(media, schema))


MAX_EXAMPLES = 3


def _examples(media: dict[str, Any], schema: dict[str, Any]) -> list[Any]:
    """The document's own examples of a body (the media type's and the schema's)."""
    found = [media.get("example"), schema.get("example")]
    named = media.get("examples")
    if isinstance(named, dict):
        found += [e.get("value") for e in named.values() if isinstance(e, dict)]
    return [e for e in found if isinstance(e, dict)][:MAX_EXAMPLES]


def _check_examples(members: Members, examples: list[Any]) -> None:
    """A merged body checked against the document's own examples: one that no longer fits says
    the merge (or the document) is wrong, in a note."""
    if not examples:
        return
    body = {n: p for n, p in members.properties.items() if p["in"] == "body"}
    schema = {
        "type": "object",
        "properties": {
            n: {k: v for k, v in p.items() if k not in _PLACING} for n, p in body.items()
        },
        "required": [n for n in members.required if n in body],
    }
    try:
        validator = compiled(tidied(schema))
    except ValueError:
        return
    for example in examples:
        errors = [error.message for error in validator.iter_errors(example)]
        if errors:
            problem = short(errors[0])
            members.converter.notes.append(
                f"the document's example does not fit the body: {problem}"
            )


_PLACING = ("in", "style", "explode")


def _whole_body(members: Members, schema: dict[str, Any], required: bool) -> None:
    """The body as one parameter, `body` (`request_body` when a parameter has that name)."""
    name = "body" if "body" not in members.properties else "request_body"
    members.add(name, schema, "body", required)
    if name in members.properties:
        members.body_parameter = name
        shape = _shape(schema)
        members.converter.notes.append(f"the body ({shape}) is the parameter '{name}'")


def _form_style(encoding: Any, name: str) -> dict[str, Any]:
    """A form member's `encoding` (style, explode) as its parameter's: Stripe's `metadata`
    (`style: deepObject`) is sent as `metadata[order_id]=...`."""
    field = encoding.get(name) if isinstance(encoding, dict) else None
    if not isinstance(field, dict):
        return {}
    style, explode = field.get("style"), field.get("explode")
    found: dict[str, Any] = {}
    if style in ("form", "spaceDelimited", "pipeDelimited", "deepObject"):
        found["style"] = style
    if isinstance(explode, bool):
        found["explode"] = explode
    return found


# Media types a body is read as, best first: JSON (and its `+json` kinds: a merge patch is an
# object of members), forms, then a JSON patch (a list of operations) and any type at all.
_JSON_LAST = ("application/json-patch+json", "*/*", "application/*")


def _media_type(content: dict[str, Any]) -> tuple[str, str] | None:
    bare = {t.split(";")[0].strip().lower(): t for t in content}
    if "application/json" in bare:
        return bare["application/json"], "json"
    json_like = [t for t in bare if t.endswith("+json") and t not in _JSON_LAST]
    if json_like:
        preferred = "application/merge-patch+json"
        return bare[preferred if preferred in json_like else json_like[0]], "json"
    for wanted, body_type in _BODY_TYPES[1:]:
        if wanted in bare:
            return bare[wanted], body_type
    last = next((t for t in _JSON_LAST if t in bare), None)
    return (bare[last], "json") if last else None


def _object(schema: dict[str, Any]) -> dict[str, Any]:
    """The body schema as one object with named members: the parts of an `allOf` merged field
    by field (a part that narrows a member narrows it, every part's `required` kept)."""
    merged = _flattened(schema)
    properties = dict(merged.get("properties") or {})
    required = list(merged.get("required") or [])
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
    if properties:  # a member required but not described (DigitalOcean's `method`): any value
        properties |= {r: {} for r in required if r not in properties and NAME.fullmatch(r)}
    return {"properties": properties, "required": [r for r in required if r in properties]}


def _flattened(schema: dict[str, Any]) -> dict[str, Any]:
    """An `allOf` and the `allOf`s of its parts (Bitbucket's `commit_comment` is an allOf of
    `comment`, itself an allOf of `object` and its members) merged into one schema."""
    merged = {k: v for k, v in schema.items() if k != "allOf"}
    for index, part in enumerate(schema.get("allOf") or []):
        if part.get("type") not in (None, "object") or "anyOf" in part or "oneOf" in part:
            raise Skip(f"the body is an allOf whose part {index} is {_shape(part)}, not an object")
        merged = merge_schemas(merged, _flattened(part))
    return merged


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
