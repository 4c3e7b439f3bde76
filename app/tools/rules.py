"""Checks on tool definitions, shared by the API (422s) and start-up validation (exit with a list).

`definition_problems` is the one entry point for a tool definition: parsing a stored tool calls
it without a policy, the tool service (create, replace, import) with the tenant's. Each check
returns problems as `(json_path, message)` pairs, so an API error can point at the field and the
start-up report can name the function.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import jmespath
import orjson
from jmespath.parser import ParsedResult

from app.http.netguard import OutboundPolicy, url_problems
from app.http.outbound import reserved_header_problems
from app.schemas.tools import (
    ContextParameter,
    FunctionSpec,
    McpToolSettings,
    ParameterSchema,
    ToolFields,
)
from app.tools.arguments import value_problems
from app.tools.schema import compile_problem, parameters_json_schema, schema_problems

Problem = tuple[str, str]

SECRET_REFERENCE = re.compile(r"\{secret:([a-zA-Z0-9_-]{1,64})\}")
_SCALAR_TYPES: dict[str, type] = {"string": str, "integer": int, "number": float, "boolean": bool}


def definition_problems(tool: ToolFields, *, policy: OutboundPolicy | None) -> list[Problem]:
    """Every rule a tool definition breaks, whatever reads it. With `policy` (a write), an
    external tool's URL must also point where the tenant may reach; without it (a stored tool
    being read), only the URL as written is judged, and the connection is guarded at call time."""
    function, context = tool.function, tool.context_parameters
    problems = parameter_problems(function, context)
    problems += endpoint_problems(tool.type, function, policy)
    problems += secret_problems(tool.type, function, context)
    problems += placement_problems(tool.type, function, context)
    problems += preset_problems(context)
    problems += output_problems(tool)
    return problems


# Literal routes under /tools/ that a tool with this id could never be fetched past.
RESERVED_TOOL_IDS = frozenset({"ids", "create", "import"})


@dataclass(frozen=True)
class WriteBounds:
    """The operator's bounds on a tool written by a tenant."""

    max_schema_bytes: int = 32_768  # MAX_TOOL_SCHEMA_BYTES, of `function` as JSON
    max_timeout_s: float = 30.0  # TOOL_TIMEOUT_S
    max_output_chars: int = 16_000  # TOOL_OUTPUT_MAX_CHARS


def write_problems(tool: ToolFields, policy: OutboundPolicy, bounds: WriteBounds) -> list[Problem]:
    """Every rule a tool a tenant writes (create, replace, import) breaks, by JSON path, but a
    function tool's signature (the tool service's, with its function dictionary): its id (a
    reserved one), its size, its definition and its own bounds."""
    tool_id = getattr(tool, "tool_id", None)
    if tool_id in RESERVED_TOOL_IDS:
        reserved = f"'{tool_id}' is reserved (it is a route under /tools/); choose another id"
        return [("$.tool_id", reserved)]
    size = len(orjson.dumps(tool.function.model_dump(exclude_none=True)))
    if size > bounds.max_schema_bytes:
        return [
            (
                "$.function",
                f"the definition is {size} bytes as JSON; the limit is "
                f"{bounds.max_schema_bytes} (MAX_TOOL_SCHEMA_BYTES)",
            )
        ]
    return definition_problems(tool, policy=policy) + bound_problems(tool, bounds)


def bound_problems(tool: ToolFields | McpToolSettings, bounds: WriteBounds) -> list[Problem]:
    """A tool's own bounds (a stored tool's, or an MCP tool's settings') stay under the
    operator's: TOOL_TIMEOUT_S, TOOL_OUTPUT_MAX_CHARS."""
    problems: list[Problem] = []
    if tool.timeout_s is not None and tool.timeout_s > bounds.max_timeout_s:
        problems.append(("$.timeout_s", f"at most {bounds.max_timeout_s:g} s (TOOL_TIMEOUT_S)"))
    max_chars = tool.output.max_chars if tool.output else None
    if max_chars is not None and max_chars > bounds.max_output_chars:
        problems.append(
            ("$.output.max_chars", f"at most {bounds.max_output_chars} (TOOL_OUTPUT_MAX_CHARS)")
        )
    return problems


def preset_problems(context_parameters: Sequence[ContextParameter]) -> list[Problem]:
    """A preset `value` has its parameter's type (strictly: `"5"` is not an integer) and is
    not also read from a secret."""
    problems: list[Problem] = []
    for index, context in enumerate(context_parameters):
        if context.value is None:
            continue
        path = f"$.context_parameters[{index}].value"
        if context.secret is not None:
            problems.append((path, "a parameter takes a preset value or a secret, not both"))
        elif value_problems(context.name, context.value, {"type": context.type}):
            problems.append(
                (path, f"the preset value is not of the parameter's type, {context.type}")
            )
    return problems


def compiled_select(expression: str) -> ParsedResult:
    """`output.select` compiled, or ValueError saying why it is not a JMESPath expression."""
    try:
        return jmespath.compile(expression)
    except RecursionError:
        raise ValueError("the expression nests too deeply") from None
    except Exception as exc:  # the parser's errors: lexer, parse, incomplete expression
        raise ValueError(f"not a JMESPath expression: {_first_line(exc)}") from None


def output_problems(tool: ToolFields) -> list[Problem]:
    """`output.select` is a JMESPath expression."""
    if tool.output is None or tool.output.select is None:
        return []
    try:
        compiled_select(tool.output.select)
    except ValueError as exc:
        return [("$.output.select", str(exc))]
    return []


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def parameter_problems(
    function: FunctionSpec, context_parameters: Sequence[ContextParameter]
) -> list[Problem]:
    """Rules a definition must follow whatever kind of tool it is."""
    problems: list[Problem] = []
    params = function.parameters
    seen: set[str] = set()
    for index, name in enumerate(params.required):
        path = f"$.function.parameters.required[{index}]"
        if name not in params.properties:
            problems.append((path, f"'{name}' is required but not defined in properties"))
        elif name in seen:
            problems.append((path, f"'{name}' is listed twice"))
        seen.add(name)
    stored = params.model_dump(exclude_none=True)
    found = schema_problems(stored, "$.function.parameters")
    if not found:  # the validator's own reading (a pattern it cannot compile, ...)
        problem = compile_problem(parameters_json_schema(stored))
        found = [("$.function.parameters", problem)] if problem else []
    problems += found
    context_names: set[str] = set()
    for index, context in enumerate(context_parameters):
        path = f"$.context_parameters[{index}].name"
        if context.name in params.properties:
            problems.append(
                (path, f"'{context.name}' is also an LLM-visible parameter; use one or the other")
            )
        if context.name in context_names:
            problems.append((path, f"context parameter '{context.name}' is listed twice"))
        context_names.add(context.name)
    return problems


def endpoint_problems(
    tool_type: str, function: FunctionSpec, policy: OutboundPolicy | None
) -> list[Problem]:
    """External tools need an outbound URL (`url_problems`) and a method; function tools have
    neither."""
    if tool_type == "function":
        return [
            (f"$.function.{field}", f"{field} is only allowed on external tools")
            for field in ("url", "method", "body_type", "body_parameter")
            if getattr(function, field) is not None
        ]
    problems: list[Problem] = []
    if function.method is None:
        problems.append(("$.function.method", "external tools need a method"))
    if function.url is None:
        problems.append(("$.function.url", "external tools need a url"))
    else:
        problems += [("$.function.url", reason) for reason in url_problems(function.url, policy)]
    return problems


def secret_problems(
    tool_type: str, function: FunctionSpec, context_parameters: Sequence[ContextParameter]
) -> list[Problem]:
    """Secret-backed context parameters are strings; header templates are well-formed."""
    problems: list[Problem] = [
        (f"$.context_parameters[{index}].type", "a parameter read from a secret is a string")
        for index, context in enumerate(context_parameters)
        if context.secret is not None and context.type != "string"
    ]
    if function.headers is None:
        return problems
    if tool_type != "external":
        return [*problems, ("$.function.headers", "headers are only allowed on external tools")]
    for name, value in function.headers.items():
        path = f"$.function.headers.{name}"
        problems += [(path, problem) for problem in reserved_header_problems([name])]
        if value.count("{secret:") != len(SECRET_REFERENCE.findall(value)):
            problems.append((path, "write a secret reference as {secret:NAME}, NAME [A-Za-z0-9_-]"))
    return problems


URL_TEMPLATE = re.compile(r"\{([^{}]*)\}")
_STYLES: dict[str, tuple[str, ...]] = {
    "query": ("form", "spaceDelimited", "pipeDelimited", "deepObject"),
    "path": ("simple",),
    "header": ("simple",),
    "body": ("form", "spaceDelimited", "pipeDelimited", "deepObject"),  # a form's `encoding`
}


def placement_problems(
    tool_type: str, function: FunctionSpec, context_parameters: Sequence[ContextParameter]
) -> list[Problem]:
    """Where an external tool's arguments go: every `{name}` in the URL's path is a required
    path parameter and every path parameter is in the URL; header parameters are headers the
    tool may set; placements are for external tools only."""
    placed = [
        (f"$.function.parameters.properties.{name}.in", name, schema.in_)
        for name, schema in function.parameters.properties.items()
    ] + [
        (f"$.context_parameters[{index}].in", context.name, context.in_)
        for index, context in enumerate(context_parameters)
    ]
    styled = [
        (f"$.function.parameters.properties.{name}.style", name, schema)
        for name, schema in function.parameters.properties.items()
        if schema.style is not None or schema.explode is not None
    ]
    if tool_type != "external":
        paths = [path for path, _, where in placed if where] + [path for path, _, _ in styled]
        return [(path, "only external tools place arguments") for path in paths]
    default = "query" if function.method in ("GET", "DELETE") else "body"
    problems: list[Problem] = []
    for path, _, schema in styled:
        place = schema.in_ or default
        if schema.style is not None and schema.style not in _STYLES[place]:
            allowed = ", ".join(_STYLES[place]) or "no style"
            problems.append((path, f"a {place} parameter takes {allowed}"))
    try:
        parts = urlsplit(function.url or "")
    except ValueError:  # a malformed URL: endpoint_problems says so
        return problems
    if any(URL_TEMPLATE.search(part) for part in (parts.netloc, parts.query, parts.fragment)):
        problems.append(("$.function.url", "only the URL's path may hold {name} templates"))
    in_url = URL_TEMPLATE.findall(parts.path)
    path_names = {name for _, name, where in placed if where == "path"}
    required = set(function.parameters.required) | {c.name for c in context_parameters}
    for name in in_url:
        if name not in path_names:
            problems.append(
                ("$.function.url", f"'{{{name}}}' needs a parameter '{name}' with \"in\": \"path\"")
            )
    for path, name, where in placed:
        if where == "path" and name not in in_url:
            problems.append((path, f"the URL has no '{{{name}}}' for this path parameter"))
        elif where == "path" and name not in required:
            problems.append((path, "a path parameter must be required"))
        elif where == "header":
            problems += [(path, problem) for problem in reserved_header_problems([name])]
    return (
        problems
        + body_parameter_problems(function, context_parameters)
        + case_problems(function, context_parameters)
    )


def body_parameter_problems(
    function: FunctionSpec, context_parameters: Sequence[ContextParameter]
) -> list[Problem]:
    """`body_parameter` names a parameter placed in a JSON body, and the only one there."""
    name = function.body_parameter
    if name is None:
        return []
    path = "$.function.body_parameter"
    schema = function.parameters.properties.get(name)
    if schema is None:
        return [(path, f"'{name}' is not a parameter of the tool")]
    default = "query" if function.method in ("GET", "DELETE") else "body"
    if (schema.in_ or default) != "body":
        return [(path, f"'{name}' is not placed in the body")]
    if function.body_type not in (None, "json"):
        return [(path, "a whole body is sent as JSON: body_type must be json")]
    placed = [(n, p.in_) for n, p in function.parameters.properties.items() if n != name]
    placed += [(c.name, c.in_) for c in context_parameters]
    others = [n for n, where in placed if (where or default) == "body"]
    if others:
        return [(path, f"the body is '{name}' alone: '{others[0]}' is placed in it too")]
    return []


def case_problems(
    function: FunctionSpec, context_parameters: Sequence[ContextParameter]
) -> list[Problem]:
    """Receivers read header names, and often JSON members, without regard to case (Go's
    `Header.Get` takes the first `x-user` of several): within an external tool, header names
    (fixed, context, visible) are unique case-insensitively, a body member may not differ from a
    hidden one only by case, and the model may not set `Content-Type`."""
    default = "query" if function.method in ("GET", "DELETE") else "body"
    placed = [
        (f"$.function.parameters.properties.{name}.in", name, s.in_ or default, False)
        for name, s in function.parameters.properties.items()
    ] + [
        (f"$.context_parameters[{index}].in", c.name, c.in_ or default, True)
        for index, c in enumerate(context_parameters)
    ]
    problems: list[Problem] = []
    fixed: dict[str, str] = {}
    for name in function.headers or {}:
        if name.lower() in fixed:
            problems.append((f"$.function.headers.{name}", _same_but_case("header", name, fixed)))
        fixed.setdefault(name.lower(), name)
    headers = dict(fixed)
    body: dict[str, tuple[str, bool]] = {}
    for path, name, where, hidden in placed:
        key = name.lower()
        if where == "header":
            if not hidden and key == "content-type":
                problems.append((path, "a parameter the model sets may not set Content-Type"))
            if key in fixed:
                problems.append((path, f"the tool's headers already set '{fixed[key]}'"))
            elif headers.get(key, name) != name:  # the same name twice is parameter_problems'
                problems.append((path, _same_but_case("header", name, headers)))
            headers.setdefault(key, name)
        elif where == "body":
            other, other_hidden = body.setdefault(key, (name, hidden))
            if other != name and (hidden or other_hidden):
                problems.append(
                    (
                        path,
                        f"the body member '{name}' differs only in case from '{other}', "
                        "and one of them is a context parameter",
                    )
                )
    return problems


def _same_but_case(kind: str, name: str, seen: dict[str, str]) -> str:
    return (
        f"the {kind} '{name}' differs from '{seen[name.lower()]}' only in case; "
        "header names are case-insensitive"
    )


def signature_problems(
    func: Callable[..., Any],
    function: FunctionSpec,
    context_parameters: Sequence[ContextParameter],
) -> list[Problem]:
    """Does `func`'s signature match the definition: names, types, required-vs-default?"""
    try:
        signature = inspect.signature(func)
        hints = typing.get_type_hints(func)
    except (TypeError, ValueError, NameError) as exc:
        return [("$.function", f"cannot read the signature of {function.name}(): {exc}")]
    declared: dict[str, tuple[str, str | None, bool]] = {}  # name -> (path, type, required)
    properties = function.parameters.properties
    for name, schema in properties.items():
        path = f"$.function.parameters.properties.{name}"
        declared[name] = (path, _describe(schema), name in function.parameters.required)
    for index, context in enumerate(context_parameters):
        declared[context.name] = (f"$.context_parameters[{index}]", context.type, False)

    problems: list[Problem] = []
    fname = f"{function.name}()"
    for name, param in signature.parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            problems.append(("$.function", f"{fname} takes *{name}; only named parameters work"))
            continue
        if name not in declared:
            problems.append(
                (
                    "$.function.parameters.properties",
                    f"{fname} takes '{name}' but the definition does not declare it",
                )
            )
            continue
        path, declared_type, required = declared[name]
        problems += _type_problems(path, fname, name, declared_type, hints.get(name))
        has_default = param.default is not inspect.Parameter.empty
        if name in properties and required and has_default:
            problems.append((path, f"'{name}' is required but {fname} gives it a default"))
        if name in properties and not required and not has_default:
            problems.append(
                (path, f"'{name}' is optional but {fname} has no default for it; mark it required")
            )
    for name, (path, _, _) in declared.items():
        if name not in signature.parameters:
            problems.append((path, f"'{name}' is not a parameter of {fname}"))
    return problems


def _describe(schema: ParameterSchema) -> str | None:
    """`string`, `array:integer`, ...; None for a schema beyond the seed's scalars and arrays of
    scalars (a model, a TypedDict: the function executor validates those with pydantic)."""
    if isinstance(schema.type, str) and schema.type in _SCALAR_TYPES:
        return schema.type
    if schema.type == "array":
        items = schema.items or {}
        kind = items.get("type", "string")
        if isinstance(kind, str) and kind in _SCALAR_TYPES and set(items) <= {"type", "enum"}:
            return f"array:{kind}"
    return None


def _type_problems(
    path: str, fname: str, name: str, declared: str | None, annotation: Any
) -> list[Problem]:
    if annotation is None:
        return [(path, f"'{name}' of {fname} has no type annotation")]
    if declared is None:
        return []
    expected = python_type_name(declared)
    if not _annotation_matches(declared, annotation):
        shown = getattr(annotation, "__name__", None) or str(annotation)
        return [
            (
                path,
                f"'{name}' is declared {declared} (expects {expected}) but {fname} "
                f"annotates it {shown}",
            )
        ]
    return []


def python_type_name(declared: str) -> str:
    if declared.startswith("array:"):
        return f"list[{_SCALAR_TYPES[declared.split(':', 1)[1]].__name__}]"
    return _SCALAR_TYPES[declared].__name__


def _annotation_matches(declared: str, annotation: Any) -> bool:
    annotation = _strip_optional(annotation)
    if declared.startswith("array:"):
        item = _SCALAR_TYPES[declared.split(":", 1)[1]]
        origin = typing.get_origin(annotation)
        args = typing.get_args(annotation)
        return origin is list and len(args) == 1 and _scalar_matches(item, args[0])
    return _scalar_matches(_SCALAR_TYPES[declared], annotation)


def _scalar_matches(expected: type, annotation: Any) -> bool:
    if typing.get_origin(annotation) is typing.Literal:
        return all(type(value) is expected for value in typing.get_args(annotation))
    return annotation is expected


def _strip_optional(annotation: Any) -> Any:
    """`X | None` matches X: an optional parameter may be annotated as nullable."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation
