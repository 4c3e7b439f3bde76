"""Tool definitions built from a Python function: its signature and Google-style docstring."""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import PydanticSchemaGenerationError, PydanticUserError, TypeAdapter

from app.schemas.tools import ParametersSchema
from app.tools.schema import compile_problem, schema_problems

_PYTHON_TO_SCHEMA: dict[type, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
}


def build_parameters(
    func: Callable[..., Any], arg_docs: dict[str, str], *, exclude: set[str]
) -> tuple[dict[str, Any], list[str]]:
    """A parameters schema from `func`'s signature, plus what could not be expressed. Scalars,
    literals and lists of them as the seed wrote them; anything else pydantic describes (models,
    TypedDicts, dataclasses, nested lists and unions) as JSON Schema, with `$defs` at the top."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    defs: dict[str, Any] = {}
    problems: list[str] = []
    hints = _hints(func)
    for pname, param in inspect.signature(func).parameters.items():
        if pname in exclude or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        schema = schema_for_annotation(hints.get(pname)) or structured_schema(
            hints.get(pname), defs
        )
        if schema is None:
            problems.append(f"parameter '{pname}' has an unsupported type {hints.get(pname)!r}")
            continue
        if pname in arg_docs:
            schema["description"] = arg_docs[pname]
        properties[pname] = schema
        if param.default is inspect.Parameter.empty:
            required.append(pname)
    built: dict[str, Any] = {"properties": properties, "required": required}
    if defs:
        built["$defs"] = defs
    return ParametersSchema.model_validate(built, strict=False).model_dump(
        exclude_none=True
    ), problems


def structured_schema(annotation: Any, defs: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON Schema pydantic gives `annotation` (its `$defs` added to `defs`), or None when
    pydantic cannot describe it or it leaves the subset tools take."""
    if annotation is None or annotation is Any:
        return None
    try:
        schema = TypeAdapter(annotation).json_schema(ref_template="#/$defs/{model}")
    except (PydanticUserError, PydanticSchemaGenerationError, TypeError):
        return None
    found = _untitled({k: v for k, v in schema.items() if k != "$defs"})
    more = {name: _untitled(sub) for name, sub in (schema.get("$defs") or {}).items()}
    trial = {"properties": {"p": found}, "$defs": {**defs, **more}}
    if schema_problems(trial, "$") or compile_problem({"type": "object", **trial}):
        return None
    defs.update(more)
    return dict(found)


def _untitled(node: Any) -> Any:
    """Pydantic's schema without its `title`s (the model sees names and descriptions)."""
    if isinstance(node, list):
        return [_untitled(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "title" or key == "discriminator":
            continue
        if key in ("properties", "$defs"):
            out[key] = {name: _untitled(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "anyOf", "oneOf", "allOf"):
            out[key] = _untitled(value)
        else:
            out[key] = value
    return out


def argument_adapters(
    func: Callable[..., Any], names: Iterable[str]
) -> dict[str, TypeAdapter[Any]]:
    """For each of `names` whose annotation is more than a JSON scalar or a list of them: the
    adapter that turns the model's JSON into what the function takes (a model, a dataclass)."""
    hints = _hints(func)
    adapters: dict[str, TypeAdapter[Any]] = {}
    for name in names:
        annotation = hints.get(name)
        if annotation is not None and schema_for_annotation(annotation) is None:
            try:
                adapters[name] = TypeAdapter(annotation)
            except (PydanticUserError, PydanticSchemaGenerationError, TypeError):
                continue
    return adapters


def schema_for_annotation(annotation: Any) -> dict[str, Any] | None:
    """The seed's parameter schema for a Python annotation (scalars, string literals, lists of
    them), or None if it has no such equivalent."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return schema_for_annotation(rest[0]) if len(rest) == 1 else None
    if typing.get_origin(annotation) is typing.Literal:
        if args and all(isinstance(a, str) for a in args):
            return {"type": "string", "enum": list(args)}
        return None
    if typing.get_origin(annotation) is list and len(args) == 1:
        item = schema_for_annotation(args[0])
        if item is None or item["type"] == "array":
            return None
        return {"type": "array", "items": item}
    if isinstance(annotation, type) and annotation in _PYTHON_TO_SCHEMA:
        return {"type": _PYTHON_TO_SCHEMA[annotation]}
    return None


_SECTION = re.compile(
    r"^\s*(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?|Notes?):\s*$"
)
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(func: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """The summary paragraph and the `Args:` descriptions of a Google-style docstring."""
    doc = inspect.getdoc(func) or ""
    lines = doc.splitlines()
    summary_lines: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line):
            break
        summary_lines.append(line.strip())
    arg_docs: dict[str, str] = {}
    section = None
    current = None
    arg_indent = None
    for line in lines:
        heading = _SECTION.match(line)
        if heading:
            section, current, arg_indent = heading.group(1), None, None
            continue
        if section not in ("Args", "Arguments", "Parameters") or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        match = _ARG_LINE.match(line)
        if match and (arg_indent is None or indent <= arg_indent):
            arg_indent = indent
            current = match.group(1).lstrip("*")
            arg_docs[current] = match.group(2).strip()
        elif current is not None:
            arg_docs[current] = f"{arg_docs[current]} {line.strip()}".strip()
    return " ".join(summary_lines), arg_docs


def _hints(func: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(func)
    except (NameError, TypeError):
        return {}


def with_signature_type(
    func: Callable[..., Any], spec: dict[str, Any], arg_docs: dict[str, str]
) -> dict[str, Any]:
    """Fill a context parameter's type and description from the signature when not given."""
    spec = dict(spec)
    name = str(spec.get("name"))
    if "type" not in spec:
        schema = schema_for_annotation(_hints(func).get(name))
        if schema is not None:
            spec["type"] = schema["type"]
    if "description" not in spec and name in arg_docs:
        spec["description"] = arg_docs[name]
    return spec
