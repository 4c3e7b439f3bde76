"""OpenAPI 3.0 / 3.1 documents -> external tool documents, one per operation.

Pure conversion (no I/O): `POST /tools/import` parses, limits and stores around it. What a tool
cannot express is never mangled: the operation is skipped with the reason (a cookie parameter,
a body that is not a JSON object of scalar and array-of-scalar members, `oneOf`, form bodies,
an unmapped security scheme). What makes the document unusable (not OpenAPI 3.0/3.1, a
`$ref` outside the document, a cyclic schema, too many operations) is a problem of the whole
document.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin

from app.schemas.fields import NAME_PATTERN, safe_tool_name

METHODS = ("get", "post", "put", "patch", "delete")
_NAME = re.compile(NAME_PATTERN)
_SCALARS = {"string", "integer", "number", "boolean"}
_MAX_REF_DEPTH = 64


class DocumentError(Exception):
    """The document cannot be imported at all; `problems` says why, each precisely."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class _Skip(Exception):
    """This operation cannot be a tool (the reason is reported)."""


@dataclass
class ImportOptions:
    operation_ids: set[str] | None = None
    openapi_tags: set[str] | None = None
    prefix: str = ""
    server_url: str | None = None
    add_tags: list[str] = field(default_factory=list)
    security: dict[str, str] = field(default_factory=dict)  # scheme name -> tenant secret
    base_url: str | None = None  # where the document was fetched from (relative servers)
    max_operations: int = 500


@dataclass
class Converted:
    tools: list[dict[str, Any]]
    skipped: list[dict[str, str]]


def convert(document: Any, options: ImportOptions) -> Converted:
    """The tools of the selected operations, and the operations skipped with their reasons."""
    if not isinstance(document, dict):
        raise DocumentError(["the document is not a JSON or YAML object"])
    version = str(document.get("openapi", ""))
    if not re.match(r"^3\.[01]\.\d+$", version):
        found = f"swagger {document['swagger']}" if "swagger" in document else repr(version)
        raise DocumentError([f"not an OpenAPI 3.0 or 3.1 document (found {found})"])
    paths = document.get("paths") or {}
    if not isinstance(paths, dict):
        raise DocumentError(["$.paths is not an object"])
    resolver = _Resolver(document)
    operations = [
        (path, method, item[method])
        for path, item in paths.items()
        if isinstance(item, dict)
        for method in METHODS
        if isinstance(item.get(method), dict)
    ]
    if len(operations) > options.max_operations:
        raise DocumentError(
            [f"the document has {len(operations)} operations; at most {options.max_operations}"]
        )
    server = _server_url(document, options)
    tools: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    taken: set[str] = set()
    for path, method, operation in operations:
        label = f"{method.upper()} {path}"
        operation_id = str(operation.get("operationId") or "")
        if options.operation_ids is not None and operation_id not in options.operation_ids:
            continue
        if options.openapi_tags is not None and options.openapi_tags.isdisjoint(
            operation.get("tags") or []
        ):
            continue
        try:
            tool = _tool(document, resolver, server, path, method, operation, paths[path], options)
        except _Skip as why:
            skipped.append({"operation": label, "operation_id": operation_id, "reason": str(why)})
            continue
        if tool["tool_id"] in taken:
            reason = f"its name '{tool['tool_id']}' is taken by another operation"
            skipped.append({"operation": label, "operation_id": operation_id, "reason": reason})
            continue
        taken.add(tool["tool_id"])
        tools.append(tool)
    if resolver.problems:
        raise DocumentError(sorted(set(resolver.problems)))
    return Converted(tools, skipped)


def tool_name(operation_id: str, method: str, path: str, prefix: str = "") -> str:
    """The operationId, else `{method}_{path words}`, as a name every provider accepts."""
    return safe_tool_name(operation_id or f"{method} {path}", prefix=prefix)


class _Resolver:
    """Local `$ref`s (`#/...`) resolved; anything else, or a cycle, is a document problem."""

    def __init__(self, document: dict[str, Any]) -> None:
        self._document = document
        self.problems: list[str] = []

    def resolve(self, node: Any, seen: tuple[str, ...] = ()) -> Any:
        """`node` with every `$ref` replaced by what it points at, deeply."""
        if isinstance(node, list):
            return [self.resolve(item, seen) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str):
            if not ref.startswith("#/"):
                self.problems.append(f"$ref '{ref}' points outside the document (not supported)")
                raise _Skip(f"$ref '{ref}' points outside the document")
            if ref in seen:
                self.problems.append(f"the schema at '{ref}' refers to itself (a cycle)")
                raise _Skip(f"the schema at '{ref}' refers to itself")
            if len(seen) > _MAX_REF_DEPTH:
                self.problems.append(f"$ref chain deeper than {_MAX_REF_DEPTH} at '{ref}'")
                raise _Skip("$ref chain too deep")
            return self.resolve(self._target(ref), (*seen, ref))
        return {key: self.resolve(value, seen) for key, value in node.items()}

    def _target(self, ref: str) -> Any:
        node: Any = self._document
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                self.problems.append(f"$ref '{ref}' points at nothing")
                raise _Skip(f"$ref '{ref}' points at nothing")
            node = node[part]
        return node


def _server_url(document: dict[str, Any], options: ImportOptions) -> str | None:
    if options.server_url:
        return options.server_url.rstrip("/")
    servers = document.get("servers") or []
    if not servers or not isinstance(servers[0], dict) or not servers[0].get("url"):
        return None
    server = servers[0]
    url = str(server["url"])
    for name, variable in (server.get("variables") or {}).items():
        if isinstance(variable, dict) and "default" in variable:
            url = url.replace(f"{{{name}}}", str(variable["default"]))
    if not re.match(r"^https?://", url):
        if options.base_url is None:
            return None
        url = urljoin(options.base_url, url)
    return url.rstrip("/")


def _tool(
    document: dict[str, Any],
    resolver: _Resolver,
    server: str | None,
    path: str,
    method: str,
    operation: dict[str, Any],
    path_item: dict[str, Any],
    options: ImportOptions,
) -> dict[str, Any]:
    if server is None:
        raise _Skip("the document names no absolute server URL: give `server_url`")
    name = tool_name(str(operation.get("operationId") or ""), method, path, options.prefix)
    properties: dict[str, Any] = {}
    required: list[str] = []
    parameters = {
        (p.get("name"), p.get("in")): p
        for p in resolver.resolve(
            list(path_item.get("parameters") or []) + list(operation.get("parameters") or [])
        )
        if isinstance(p, dict)
    }
    for (param_name, where), parameter in parameters.items():
        if where == "cookie":
            raise _Skip(f"the cookie parameter '{param_name}' cannot be sent")
        if where not in ("path", "query", "header"):
            raise _Skip(f"parameter '{param_name}' has no valid 'in'")
        _add(properties, str(param_name), parameter.get("schema") or {}, where)
        properties[str(param_name)].setdefault("description", _text(parameter))
        if parameter.get("required") or where == "path":
            if param_name not in required:
                required.append(str(param_name))
    _body(resolver, operation, properties, required)
    headers, context = _security(document, operation, options)
    fixed = {name.lower() for name in headers} | {c["name"].lower() for c in context}
    for param, item in properties.items():
        if item["in"] in ("header", "query") and param.lower() in fixed:
            raise _Skip(f"the {item['in']} parameter '{param}' is also its credential")
    for item in properties.values():
        if not item.get("description"):
            item.pop("description", None)
    description = "\n\n".join(
        part for part in (operation.get("summary"), operation.get("description")) if part
    )
    tags = list(dict.fromkeys([*options.add_tags]))
    tool: dict[str, Any] = {
        "tool_id": name,
        "type": "external",
        "function": {
            "name": name,
            "description": str(description)[:4096],
            "parameters": {"type": "object", "properties": properties, "required": required},
            "url": server + path,
            "method": method.upper(),
        },
        "context_parameters": context,
        "tags": tags,
    }
    if headers:
        tool["function"]["headers"] = headers
    if operation.get("summary"):
        tool["title"] = str(operation["summary"])[:128]
    read_only = method == "get"
    tool["annotations"] = {"read_only_hint": read_only, "open_world_hint": True}
    if method == "delete":
        tool["annotations"]["destructive_hint"] = True
    return tool


def _text(parameter: dict[str, Any]) -> str:
    return str(parameter.get("description") or "")[:4096]


def _add(properties: dict[str, Any], name: str, schema: Any, where: str) -> None:
    if not _NAME.fullmatch(name):
        raise _Skip(f"the {where} parameter '{name}' is not a name tools accept ([a-zA-Z0-9_-])")
    if name in properties:
        raise _Skip(f"'{name}' is both a {properties[name]['in']} and a {where} parameter")
    properties[name] = {**_parameter(name, schema), "in": where}


def _parameter(name: str, schema: Any) -> dict[str, Any]:
    """A schema as a tool parameter: scalars, and arrays of scalars."""
    if not isinstance(schema, dict):
        raise _Skip(f"'{name}' has no schema")
    for keyword in ("anyOf", "oneOf"):  # `X or null` (3.1's optional values) is X
        choices = schema.get(keyword)
        if isinstance(choices, list):
            real = [c for c in choices if not (isinstance(c, dict) and c.get("type") == "null")]
            if len(real) == 1 and isinstance(real[0], dict):
                schema = {**{k: v for k, v in schema.items() if k != keyword}, **real[0]}
    for keyword in ("oneOf", "anyOf", "allOf", "not"):
        if keyword in schema:
            raise _Skip(f"'{name}' uses {keyword}, which tool parameters cannot express")
    kind = schema.get("type")
    if isinstance(kind, list):  # 3.1: ["string", "null"]
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    out: dict[str, Any] = {}
    if schema.get("description"):
        out["description"] = str(schema["description"])[:4096]
    if kind in _SCALARS:
        out["type"] = kind
        enum = [str(v) for v in schema.get("enum") or [] if v is not None and str(v)][:256]
        if kind == "string" and enum:
            out["enum"] = enum
        return out
    if kind == "array":
        items = schema.get("items") or {}
        item_kind = items.get("type") if isinstance(items, dict) else None
        if item_kind not in _SCALARS:
            raise _Skip(f"'{name}' is an array of {item_kind or 'untyped items'}")
        out["type"] = "array"
        out["items"] = {"type": item_kind}
        if item_kind == "string" and isinstance(items.get("enum"), list) and items["enum"]:
            out["items"]["enum"] = [str(value) for value in items["enum"]][:256]
        for source, target in (("minItems", "min_items"), ("maxItems", "max_items")):
            if isinstance(schema.get(source), int) and 0 <= schema[source] <= 1000:
                out[target] = schema[source]
        return out
    what = "an object" if kind == "object" else "untyped"
    raise _Skip(f"'{name}' is {what}, which tool parameters cannot express")


def _body(
    resolver: _Resolver,
    operation: dict[str, Any],
    properties: dict[str, Any],
    required: list[str],
) -> None:
    body = resolver.resolve(operation.get("requestBody"))
    if not isinstance(body, dict):
        return
    content = body.get("content") or {}
    json_type = next((t for t in content if t.split(";")[0].strip() == "application/json"), None)
    if json_type is None:
        kinds = ", ".join(sorted(content)) or "none"
        raise _Skip(f"the request body is not JSON ({kinds})")
    schema = (content[json_type] or {}).get("schema") or {}
    for keyword in ("oneOf", "anyOf", "allOf"):
        if keyword in schema:
            raise _Skip(f"the JSON body uses {keyword}, which tool parameters cannot express")
    if schema.get("type", "object") != "object" or not isinstance(schema.get("properties"), dict):
        raise _Skip("the JSON body is not an object with named members")
    body_required = set(schema.get("required") or []) if body.get("required") else set()
    for name, member in schema["properties"].items():
        _add(properties, str(name), member, "body")
        if name in body_required:
            required.append(str(name))


def _security(
    document: dict[str, Any], operation: dict[str, Any], options: ImportOptions
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """Header templates and secret-backed context parameters for the operation's security."""
    requirements = operation.get("security", document.get("security"))
    if not requirements:
        return {}, []
    if not isinstance(requirements, list):
        raise _Skip("its 'security' is not a list of requirements")
    if any(requirement == {} for requirement in requirements):
        return {}, []  # security is optional for this operation
    schemes = (document.get("components") or {}).get("securitySchemes") or {}
    reasons = []
    for requirement in requirements:  # the first one the options can satisfy
        if not isinstance(requirement, dict):
            continue
        try:
            return _satisfy(requirement, schemes, options)
        except _Skip as why:
            reasons.append(str(why))
    raise _Skip("; ".join(reasons) or "its security requirements are malformed")


def _satisfy(
    requirement: dict[str, Any], schemes: dict[str, Any], options: ImportOptions
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    headers: dict[str, str] = {}
    context: list[dict[str, Any]] = []
    for scheme_name in requirement:
        secret = options.security.get(scheme_name)
        scheme = schemes.get(scheme_name)
        if secret is None or not isinstance(scheme, dict):
            raise _Skip(f"it needs the security scheme '{scheme_name}': map it to a secret")
        kind = scheme.get("type")
        if kind == "apiKey" and scheme.get("in") == "header":
            headers[str(scheme.get("name"))] = f"{{secret:{secret}}}"
        elif kind == "apiKey" and scheme.get("in") == "query":
            name = str(scheme.get("name"))
            if not _NAME.fullmatch(name):
                raise _Skip(f"the API key's query name '{name}' is not a name tools accept")
            context.append({"name": name, "secret": secret, "in": "query"})
        elif kind == "http" and str(scheme.get("scheme", "")).lower() == "basic":
            headers["Authorization"] = f"Basic {{secret:{secret}}}"
        elif kind in ("http", "oauth2", "openIdConnect"):
            headers["Authorization"] = f"Bearer {{secret:{secret}}}"
        else:
            raise _Skip(f"the security scheme '{scheme_name}' ({kind}) cannot be sent")
    return headers, context
