"""OpenAPI 3.0 / 3.1 documents -> external tool documents, one per operation.

Pure conversion (no I/O): `POST /tools/import` parses, limits and stores around it, off the
event loop. What a tool cannot express is never mangled: the operation is skipped with the
reason (a cookie parameter, a body that is not a JSON object of scalar and array-of-scalar
members, `oneOf`, form bodies, an unmapped security scheme, a path that does not start with
`/`, a field of the wrong type). What makes the document unusable (not OpenAPI 3.0/3.1, a
`$ref` outside the document, a cyclic schema, too many operations, `servers` or `components` of
the wrong type, the resolution budget spent) is a problem of the whole document, named by its
path. Nothing in the document is trusted to have the type the specification gives it.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin

import orjson

from app.schemas.fields import safe_tool_name
from app.tools.openapi_fields import NAME, kind, short, text_field
from app.tools.openapi_parameters import Members, body_members, parameter_members
from app.tools.openapi_refs import CpuSpent, DocumentError, Resolver, Skip
from app.tools.openapi_schema import SchemaConverter
from app.tools.openapi_shapes import SIZE_CUTS, tidied
from app.tools.schema import MAX_SCHEMA_NODES
from app.tools.swagger import as_openapi3

__all__ = ["METHODS", "Converted", "DocumentError", "ImportOptions", "convert", "tool_name"]

METHODS = ("get", "post", "put", "patch", "delete")
MAX_NAME = 64
SCHEMA_DEPTHS = (16, 4, 1)  # tried in turn until a tool's parameters fit
_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]+")
_HEADER = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$")  # an HTTP token


@dataclass
class ImportOptions:
    operation_ids: set[str] | None = None
    openapi_tags: set[str] | None = None
    prefix: str = ""
    server_url: str | None = None
    add_tags: list[str] = field(default_factory=list)
    security: dict[str, str] = field(default_factory=dict)  # scheme name -> tenant secret
    base_url: str | None = None  # where the document was fetched from (relative servers)
    max_operations: int = 500  # of the selected operations
    reserved: frozenset[str] = frozenset()  # tool ids the importer may not give (suffixed)
    max_schema_bytes: int = 30_000  # of a tool's parameters (MAX_TOOL_SCHEMA_BYTES, less room)
    max_tool_bytes: int = 32_768  # of its whole `function` as JSON (MAX_TOOL_SCHEMA_BYTES)
    converters: dict[int, SchemaConverter] = field(default_factory=dict)  # one per depth
    cpu_deadline: float | None = None  # `time.process_time()` past which the import stops

    def check_cpu(self) -> None:
        """CpuSpent once this process has used the import's CPU budget."""
        if self.cpu_deadline is not None and time.process_time() > self.cpu_deadline:
            raise CpuSpent


@dataclass
class Converted:
    tools: list[dict[str, Any]]
    skipped: list[dict[str, str]]
    notes: list[dict[str, str]]
    operations: list[dict[str, str]] = field(default_factory=list)  # each tool's, in order
    selected: int = 0  # operations selected (each a tool or a skip)


def convert(document: Any, options: ImportOptions) -> Converted:
    """The tools of the selected operations, the operations skipped with their reasons, and
    notes on what was left out of the tools made."""
    document = as_openapi3(document)
    paths = _checked_document(document)
    resolver = Resolver(document)
    converted = Converted([], [], [])
    operations = [
        (path, method, item[method], item)
        for path, item in _path_items(resolver, paths, converted.skipped)
        for method in METHODS
        if isinstance(item.get(method), dict)
    ]
    selected = [op for op in operations if _selected(op[2], _operation_id(op[2]), options)]
    if len(selected) > options.max_operations:
        raise DocumentError(
            [f"{len(selected)} operations are selected; at most {options.max_operations}"]
        )
    server = _server_url(document, options)
    converted.selected = len(selected)
    taken: set[str] = set(options.reserved)
    for path, method, operation, item in selected:
        options.check_cpu()
        label = f"{method.upper()} {short(path)}"
        operation_id = _operation_id(operation)
        notes: list[str] = []
        try:
            tool = _sized_tool(
                document, resolver, server, path, method, operation, item, options, notes
            )
        except Skip as why:
            converted.skipped.append(
                {
                    "operation": label,
                    "operation_id": operation_id,
                    "reason": str(why),
                    "stage": "conversion",
                }
            )
            continue
        _rename(tool, taken)
        converted.tools.append(tool)
        converted.operations.append({"operation": label, "operation_id": operation_id})
        converted.notes += [
            {"operation": label, "tool_id": tool["tool_id"], "note": note} for note in notes[:20]
        ]
    if resolver.problems:
        raise DocumentError(sorted(set(resolver.problems)))
    return converted


def _operation_id(operation: dict[str, Any]) -> str:
    raw_id = operation.get("operationId")
    return raw_id if isinstance(raw_id, str) else ""


def _path_items(
    resolver: Resolver, paths: dict[str, Any], skipped: list[dict[str, str]]
) -> list[tuple[str, dict[str, Any]]]:
    """Each path's item, a Path Item `$ref` followed; one that cannot be is a skip of the
    whole path (its operations are unknown), with the reason."""
    items = []
    for path, item in paths.items():
        if isinstance(item, dict) and isinstance(item.get("$ref"), str):
            try:
                target = resolver.follow(item["$ref"])
                if not isinstance(target, dict):
                    raise Skip(f"its Path Item $ref points at {kind(target)}, not a Path Item")
            except Skip as why:
                reason = f"its Path Item $ref cannot be followed: {why}"
                skipped.append(
                    {
                        "operation": f"* {short(path)}",
                        "operation_id": "",
                        "reason": reason,
                        "stage": "conversion",
                    }
                )
                continue
            item = {**target, **{k: v for k, v in item.items() if k != "$ref"}}
        if isinstance(item, dict):
            items.append((path, item))
    return items


def _rename(tool: dict[str, Any], taken: set[str]) -> None:
    """A name already taken (or reserved) gets a stable suffix: `_2`, `_3`, ... in document
    order, cut to fit the name limit."""
    name = tool["tool_id"]
    number = 1
    while name in taken:
        number += 1
        suffix = f"_{number}"
        name = tool["tool_id"][: MAX_NAME - len(suffix)] + suffix
    taken.add(name)
    tool["tool_id"] = tool["function"]["name"] = name


def tool_name(operation_id: str, method: str, path: str, prefix: str = "") -> str:
    """The operationId, else `{method}_{path words}`, as a name every provider accepts."""
    return safe_tool_name(operation_id or f"{method} {path}", prefix=prefix)


def _checked_document(document: Any) -> dict[str, Any]:
    """The document's `paths`, once the fields every operation relies on have their types."""
    if not isinstance(document, dict):
        raise DocumentError(["the document is not a JSON or YAML object"])
    version = document.get("openapi", "")
    if not isinstance(version, str) or not re.match(r"^3\.[01]\.\d+$", version):
        swagger = document.get("swagger")
        found = f"swagger {short(swagger)}" if isinstance(swagger, str) else _shown(version)
        raise DocumentError([f"not an OpenAPI 3.0 or 3.1 document (found {found})"])
    paths = document.get("paths") or {}
    if not isinstance(paths, dict):
        raise DocumentError([f"$.paths is {kind(paths)}, not an object"])
    components = document.get("components")
    if components is not None and not isinstance(components, dict):
        raise DocumentError([f"$.components is {kind(components)}, not an object"])
    schemes = (components or {}).get("securitySchemes")
    if schemes is not None and not isinstance(schemes, dict):
        raise DocumentError([f"$.components.securitySchemes is {kind(schemes)}, not an object"])
    return paths


def _shown(value: Any) -> str:
    return repr(short(value)) if isinstance(value, str) else kind(value)


def _selected(operation: dict[str, Any], operation_id: str, options: ImportOptions) -> bool:
    if options.operation_ids is not None and operation_id not in options.operation_ids:
        return False
    if options.openapi_tags is None:
        return True
    tags = operation.get("tags")
    own = {tag for tag in tags if isinstance(tag, str)} if isinstance(tags, list) else set()
    return not options.openapi_tags.isdisjoint(own)


def _server_url(document: dict[str, Any], options: ImportOptions) -> str | None:
    if options.server_url:
        return options.server_url.rstrip("/")
    servers = document.get("servers")
    if not servers:
        return None
    if not isinstance(servers, list):
        raise DocumentError([f"$.servers is {kind(servers)}, not a list"])
    server = servers[0]
    if not isinstance(server, dict) or not isinstance(server.get("url"), str):
        return None  # each operation is skipped: no absolute server URL
    url: str = server["url"]
    variables = server.get("variables") or {}
    if not isinstance(variables, dict):
        raise DocumentError([f"$.servers[0].variables is {kind(variables)}, not an object"])
    for name, variable in variables.items():
        default = variable.get("default") if isinstance(variable, dict) else None
        if isinstance(default, str | int | float) and not isinstance(default, bool):
            url = url.replace(f"{{{name}}}", str(default))
    if not url:
        return None
    if not re.match(r"^https?://", url):
        if options.base_url is None:
            return None
        url = urljoin(options.base_url, url)
    return url.rstrip("/")


def _sized_tool(
    document: dict[str, Any],
    resolver: Resolver,
    server: str | None,
    path: str,
    method: str,
    operation: dict[str, Any],
    path_item: dict[str, Any],
    options: ImportOptions,
    notes: list[str],
) -> dict[str, Any]:
    """The operation's tool, cut until it fits what a tool holds (`MAX_TOOL_SCHEMA_BYTES`, 2,000
    subschemas), in a stated order: descriptions, then examples, then the detail of optional
    members, each first at full depth and then with schemas shown shallower (16, 4, 1 levels);
    a tool that does not fit even then is skipped with its reason."""
    nodes = size = 0
    for depth in SCHEMA_DEPTHS:
        converter = options.converters.setdefault(depth, SchemaConverter(resolver, max_depth=depth))
        converter.notes = []
        tool = _tool(
            document, resolver, server, path, method, operation, path_item, options, converter
        )
        function = tool["function"]
        for stage, (what, cut) in enumerate(SIZE_CUTS):
            if stage:
                function["parameters"] = cut(function["parameters"])
                if what == "descriptions":
                    function["description"] = function["description"][:1024]
            nodes, size = converter.weight(function["parameters"])
            if nodes > MAX_SCHEMA_NODES or size > options.max_schema_bytes:
                continue
            size = len(orjson.dumps(function))
            if size > options.max_tool_bytes:
                continue
            if depth != SCHEMA_DEPTHS[0]:
                converter.notes.append(f"schemas deeper than {depth} levels are shown loosely")
            if stage:
                cuts = ", ".join(name for name, _ in SIZE_CUTS[1 : stage + 1])
                converter.notes.append(f"to fit what a tool holds, cut: {cuts}")
            notes += converter.notes
            return tool
    raise Skip(
        f"it is larger than a tool holds even cut ({nodes} subschemas, {size} bytes; "
        f"descriptions, examples and optional members' detail cut)"
    )


def _tool(
    document: dict[str, Any],
    resolver: Resolver,
    server: str | None,
    path: str,
    method: str,
    operation: dict[str, Any],
    path_item: dict[str, Any],
    options: ImportOptions,
    converter: SchemaConverter,
) -> dict[str, Any]:
    if not path.startswith("/"):  # `.evil.example/x` after the server's host changes the host
        raise Skip(f"its path '{short(path)}' does not start with '/'")
    if server is None:
        raise Skip("the document names no absolute server URL: give `server_url`")
    raw_id = operation.get("operationId")
    if raw_id is not None and not isinstance(raw_id, str):
        raise Skip(f"its operationId is {kind(raw_id)}, not a string")
    summary = text_field(operation, "summary")
    description = "\n\n".join(p for p in (summary, text_field(operation, "description")) if p)
    name = tool_name(raw_id or "", method, path, options.prefix)
    headers, context = _security(document, operation, options)
    members = Members(
        converter,
        credential_headers=frozenset(header.lower() for header in headers),
        credential_query=frozenset(c["name"] for c in context),
    )
    parameter_members(members, resolver, path_item, operation)
    body_members(members, resolver, operation)
    function: dict[str, Any] = {
        "name": name,
        "description": description[:4096],
        "parameters": {
            "type": "object",
            "properties": {name: tidied(p) for name, p in members.properties.items()},
            "required": members.required,
        },
        "url": server + path,
        "method": method.upper(),
    }
    if members.body_type not in (None, "json"):
        function["body_type"] = members.body_type
    if members.body_parameter is not None:
        function["body_parameter"] = members.body_parameter
    if members.content_type is not None:
        headers = {**headers, "Content-Type": members.content_type}
    tool: dict[str, Any] = {
        "tool_id": name,
        "type": "external",
        "function": function,
        "context_parameters": context,
        "tags": list(dict.fromkeys(options.add_tags)),
        "annotations": {"read_only_hint": method == "get", "open_world_hint": True},
    }
    if headers:
        function["headers"] = headers
    if summary:
        tool["title"] = summary[:128]
    if method == "delete":
        tool["annotations"]["destructive_hint"] = True
    return tool


def _security(
    document: dict[str, Any], operation: dict[str, Any], options: ImportOptions
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """Header templates and secret-backed context parameters for the operation's security."""
    requirements = operation.get("security", document.get("security"))
    if not requirements:
        return {}, []
    if not isinstance(requirements, list):
        raise Skip(f"its 'security' is {kind(requirements)}, not a list of requirements")
    schemes = (document.get("components") or {}).get("securitySchemes") or {}
    reasons = []
    for requirement in requirements:  # the first one the options satisfy, wherever `{}` is
        if not isinstance(requirement, dict) or requirement == {}:
            continue
        try:
            return _satisfy(requirement, schemes, options)
        except Skip as why:
            reasons.append(str(why))
    if any(requirement == {} for requirement in requirements):
        return {}, []  # security is optional for this operation, and none is mapped
    raise Skip("; ".join(reasons) or "its security requirements are malformed")


def _satisfy(
    requirement: dict[str, Any], schemes: dict[str, Any], options: ImportOptions
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    headers: dict[str, str] = {}
    context: list[dict[str, Any]] = []
    for scheme_name in requirement:
        secret = options.security.get(scheme_name)
        scheme = schemes.get(scheme_name)
        if secret is None or not isinstance(scheme, dict):
            raise Skip(f"it needs the security scheme '{short(scheme_name)}': map it to a secret")
        scheme_type, name = scheme.get("type"), scheme.get("name")
        http_scheme = str(scheme.get("scheme")).lower()
        if scheme_type == "apiKey" and scheme.get("in") in ("header", "query"):
            pattern = _HEADER if scheme["in"] == "header" else NAME
            if not isinstance(name, str) or not pattern.fullmatch(name):
                raise Skip(f"the API key name of '{short(scheme_name)}' is not a name tools accept")
            if scheme["in"] == "header":
                headers[name] = f"{{secret:{secret}}}"
            else:
                context.append({"name": name, "secret": secret, "in": "query"})
        elif scheme_type == "http" and http_scheme == "basic":
            headers["Authorization"] = f"Basic {{secret:{secret}}}"
        elif scheme_type in ("http", "oauth2", "openIdConnect"):
            headers["Authorization"] = f"Bearer {{secret:{secret}}}"
        else:
            shown = short(scheme_type) if isinstance(scheme_type, str) else kind(scheme_type)
            if scheme_type == "apiKey" and isinstance(scheme.get("in"), str):
                shown += f" in {short(scheme['in'])}"
            raise Skip(f"the security scheme '{short(scheme_name)}' ({shown}) cannot be sent")
    return headers, context
