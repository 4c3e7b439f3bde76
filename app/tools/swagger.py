"""Swagger 2.0 documents -> OpenAPI 3.0, for the importer (app/tools/openapi.py).

No well-kept Python converter exists (swagger2openapi is JavaScript), so this one converts what
the importer reads: `host`/`basePath`/`schemes` as a server, `definitions` as component
schemas (every `#/definitions/` reference rewritten), `securityDefinitions` as security
schemes, `body` parameters as a request body in the first type of `consumes`, `formData` ones as
a form (multipart when a part is a file or `consumes` says so), and each other parameter's
type, items and bounds as its schema with `collectionFormat` as its style. Each node is copied
once, iteratively; the rest of the document is read as it is.
"""

from __future__ import annotations

from typing import Any

_SCHEMA_KEYS = (
    "type",
    "format",
    "items",
    "enum",
    "default",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "uniqueItems",
    "multipleOf",
)
_COLLECTION = {  # collectionFormat -> (style, explode) in a query; path and header: simple
    "csv": ("form", False),
    "ssv": ("spaceDelimited", False),
    "pipes": ("pipeDelimited", False),
    "multi": ("form", True),
}
_METHODS = ("get", "put", "post", "delete", "options", "head", "patch")


def as_openapi3(document: Any) -> Any:
    """A Swagger 2.0 document as OpenAPI 3.0; anything else as it is."""
    if not isinstance(document, dict) or document.get("swagger") != "2.0":
        return document
    document = _rewritten_refs(document)
    converted: dict[str, Any] = {
        "openapi": "3.0.3",
        "info": document.get("info") or {},
        "paths": {},
        "components": {
            "schemas": _dict(document.get("definitions")),
            "securitySchemes": {
                name: _scheme(scheme)
                for name, scheme in _dict(document.get("securityDefinitions")).items()
            },
        },
    }
    if "security" in document:
        converted["security"] = document["security"]
    host = document.get("host")
    base = document.get("basePath") if isinstance(document.get("basePath"), str) else ""
    schemes = [s for s in document.get("schemes") or [] if s in ("https", "http")]
    if isinstance(host, str) and host:
        converted["servers"] = [{"url": f"{(schemes or ['https'])[0]}://{host}{base}"}]
    elif base:
        converted["servers"] = [{"url": base}]
    shared = _dict(document.get("parameters"))
    consumes = _list(document.get("consumes"))
    for path, item in _dict(document.get("paths")).items():
        if isinstance(item, dict):
            converted["paths"][path] = _path_item(item, shared, consumes)
    return converted


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _rewritten_refs(document: dict[str, Any]) -> dict[str, Any]:
    """A copy with `#/definitions/X` references pointing at `#/components/schemas/X`."""
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(document, root, 0)]
    while stack:
        value, parent, slot = stack.pop()
        if isinstance(value, dict):
            copy: dict[str, Any] = {}
            for key, item in value.items():
                if key == "$ref" and isinstance(item, str) and item.startswith("#/definitions/"):
                    item = "#/components/schemas/" + item[len("#/definitions/") :]
                copy[key] = None
                stack.append((item, copy, key))
            parent[slot] = copy
        elif isinstance(value, list):
            items: list[Any] = [None] * len(value)
            stack.extend((item, items, i) for i, item in enumerate(value))
            parent[slot] = items
        else:
            parent[slot] = value
    result: dict[str, Any] = root[0]
    return result


def _scheme(scheme: Any) -> Any:
    if not isinstance(scheme, dict):
        return scheme
    if scheme.get("type") == "basic":
        return {"type": "http", "scheme": "basic"}
    if scheme.get("type") == "oauth2":
        return {"type": "oauth2", "flows": {}}
    return scheme


def _path_item(item: dict[str, Any], shared: dict[str, Any], consumes: list[Any]) -> Any:
    converted: dict[str, Any] = {}
    common = _list(item.get("parameters"))
    for method in _METHODS:
        operation = item.get(method)
        if isinstance(operation, dict):
            converted[method] = _operation(operation, common, shared, consumes)
    return converted


def _operation(
    operation: dict[str, Any], common: list[Any], shared: dict[str, Any], consumes: list[Any]
) -> dict[str, Any]:
    own = _list(operation.get("parameters"))
    media = _list(operation.get("consumes")) or consumes
    converted = {k: v for k, v in operation.items() if k not in ("parameters", "consumes")}
    parameters: list[Any] = []
    form: dict[str, Any] = {}
    required: list[str] = []
    for parameter in [*common, *own]:
        if isinstance(parameter, dict) and isinstance(parameter.get("$ref"), str):
            parameter = shared.get(parameter["$ref"].rsplit("/", 1)[-1], parameter)
        if not isinstance(parameter, dict):
            continue
        where = parameter.get("in")
        if where == "body":
            content_type = next((m for m in media if isinstance(m, str)), "application/json")
            converted["requestBody"] = {
                "content": {content_type: {"schema": parameter.get("schema") or {}}},
                "required": parameter.get("required") is True,
            }
        elif where == "formData" and isinstance(parameter.get("name"), str):
            form[parameter["name"]] = _schema(parameter)
            if parameter.get("required") is True:
                required.append(parameter["name"])
        else:
            parameters.append(_parameter(parameter))
    if form:
        files = any(s.get("type") == "file" for s in form.values())
        kind = "multipart/form-data" if files or "multipart/form-data" in media else None
        schema = {"type": "object", "properties": form, "required": required}
        converted["requestBody"] = {
            "content": {kind or "application/x-www-form-urlencoded": {"schema": schema}},
            "required": bool(required),
        }
    if parameters:
        converted["parameters"] = parameters
    return converted


def _schema(parameter: dict[str, Any]) -> dict[str, Any]:
    schema = {key: parameter[key] for key in _SCHEMA_KEYS if key in parameter}
    if isinstance(schema.get("items"), dict):
        schema["items"] = {k: v for k, v in schema["items"].items() if k in (*_SCHEMA_KEYS, "$ref")}
    return schema


def _parameter(parameter: dict[str, Any]) -> dict[str, Any]:
    converted: dict[str, Any] = {
        key: parameter[key] for key in ("name", "in", "description", "required") if key in parameter
    }
    converted["schema"] = _schema(parameter)
    style = _COLLECTION.get(str(parameter.get("collectionFormat", "csv")))
    if parameter.get("type") == "array" and style is not None:
        if parameter.get("in") == "query":
            converted["style"], converted["explode"] = style
        elif style[0] == "form" and not style[1]:
            converted["style"], converted["explode"] = "simple", False
    return converted
