"""The server's function dictionary: Python callables that `function` tools may name.

Definitions are built from a function's signature and its Google-style docstring, or supplied
by hand. Registration never raises: `validate_registry` collects every problem so start-up can
refuse with one complete list.
"""

from __future__ import annotations

import importlib
import inspect
import re
import types
import typing
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypedDict, TypeVar, Unpack, overload

from pydantic import ValidationError

from app.schemas.tools import ContextParameter, FunctionSpec, ParametersSchema
from app.tools.rules import parameter_problems, signature_problems

F = TypeVar("F", bound=Callable[..., Any])

_PYTHON_TO_SCHEMA: dict[type, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
}


@dataclass(frozen=True)
class RegisteredFunction:
    """A callable with the tool definition it is exposed under."""

    func: Callable[..., Any]
    tool_id: str
    function: FunctionSpec
    context_parameters: tuple[ContextParameter, ...] = ()
    tags: tuple[str, ...] = ()
    build_problems: tuple[str, ...] = field(default=())

    @property
    def name(self) -> str:
        return self.function.name

    @cached_property
    def defaulted_parameters(self) -> frozenset[str]:
        """Parameters the function gives a default: context ones among them may be absent."""
        signature = inspect.signature(self.func)
        return frozenset(n for n, p in signature.parameters.items() if p.default is not p.empty)

    def seed_document(self) -> dict[str, Any]:
        """The tool document seeded into every tenant's collection."""
        return {
            "tool_id": self.tool_id,
            "type": "function",
            "function": self.function.model_dump(exclude_none=True),
            "context_parameters": [
                c.model_dump(exclude_none=True) for c in self.context_parameters
            ],
            "tags": list(self.tags),
            "enabled": True,
        }


class RegisterOptions(TypedDict, total=False):
    name: str
    tool_id: str
    description: str
    parameters: dict[str, Any]
    context_parameters: Sequence[str | dict[str, Any]]
    tags: Sequence[str]


class FunctionRegistry:
    """Name -> callable, with the definition each callable is offered to models under."""

    def __init__(self) -> None:
        self._functions: dict[str, RegisteredFunction] = {}
        self._problems: list[str] = []

    @overload
    def register(self, func: F, **options: Unpack[RegisterOptions]) -> F: ...

    @overload
    def register(
        self, func: None = None, **options: Unpack[RegisterOptions]
    ) -> Callable[[F], F]: ...

    def register(
        self, func: F | None = None, **options: Unpack[RegisterOptions]
    ) -> F | Callable[[F], F]:
        """Register `func` (also usable as `@registry.register(...)`).

        `parameters` is a hand-written JSON-schema-like definition; without it one is built from
        the signature. Names in `context_parameters` are filled in by the server, never the model.
        """

        def decorator(target: F) -> F:
            self._add(
                target,
                options.get("name"),
                options.get("tool_id"),
                options.get("description"),
                options.get("parameters"),
                options.get("context_parameters", ()),
                options.get("tags", ()),
            )
            return target

        return decorator(func) if func is not None else decorator

    def _add(
        self,
        func: Callable[..., Any],
        name: str | None,
        tool_id: str | None,
        description: str | None,
        parameters: dict[str, Any] | None,
        context_parameters: Sequence[str | dict[str, Any]],
        tags: Sequence[str],
    ) -> None:
        fname = name or func.__name__
        if fname in self._functions:
            self._problems.append(f"{fname}: registered twice")
            return
        summary, arg_docs = parse_docstring(func)
        context_specs = [c if isinstance(c, dict) else {"name": c} for c in context_parameters]
        context_names = {str(c.get("name")) for c in context_specs}
        problems: list[str] = []
        if parameters is None:
            parameters, built_problems = build_parameters(func, arg_docs, exclude=context_names)
            problems += built_problems
        context_specs = [_with_signature_type(func, spec, arg_docs) for spec in context_specs]
        try:
            spec = FunctionSpec.model_validate(
                {"name": fname, "description": description or summary, "parameters": parameters},
                strict=False,
            )
            contexts = tuple(ContextParameter.model_validate(c) for c in context_specs)
        except ValidationError as exc:
            self._problems.append(f"{fname}: invalid definition: {_short(exc)}")
            return
        self._functions[fname] = RegisteredFunction(
            func=func,
            tool_id=tool_id or fname.replace("_", "-"),
            function=spec,
            context_parameters=contexts,
            tags=tuple(tags),
            build_problems=tuple(problems),
        )

    def get(self, name: str) -> RegisteredFunction | None:
        return self._functions.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._functions

    def __iter__(self) -> Iterator[RegisteredFunction]:
        return iter(self._functions.values())

    def __len__(self) -> int:
        return len(self._functions)

    def problems(self) -> list[str]:
        """Every problem of every registration, as readable lines; empty when all is well."""
        lines = list(self._problems)
        for entry in self:
            found = [*entry.build_problems]
            found += [
                f"{p}: {m}" for p, m in parameter_problems(entry.function, entry.context_parameters)
            ]
            found += [
                m
                for _, m in signature_problems(entry.func, entry.function, entry.context_parameters)
            ]
            lines += [f"{entry.name}: {line}" for line in found]
        return lines


class FunctionDictionaryError(Exception):
    """The function dictionary does not match its tool definitions."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        listing = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"the function dictionary has {len(problems)} problem(s):\n{listing}")


def validate_registry(registry: FunctionRegistry) -> None:
    """Raise FunctionDictionaryError listing every problem, or return quietly."""
    problems = registry.problems()
    if problems:
        raise FunctionDictionaryError(problems)


def load_registry(path: str) -> FunctionRegistry:
    """Import `package.module:attribute` and return the FunctionRegistry it names."""
    module_name, _, attribute = path.partition(":")
    try:
        registry = getattr(importlib.import_module(module_name), attribute or "registry")
    except (ImportError, AttributeError) as exc:
        raise FunctionDictionaryError([f"cannot load FUNCTIONS_MODULE={path!r}: {exc}"]) from exc
    if not isinstance(registry, FunctionRegistry):
        raise FunctionDictionaryError([f"FUNCTIONS_MODULE={path!r} is not a FunctionRegistry"])
    return registry


def build_parameters(
    func: Callable[..., Any], arg_docs: dict[str, str], *, exclude: set[str]
) -> tuple[dict[str, Any], list[str]]:
    """A parameters schema from `func`'s signature, plus what could not be expressed."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    problems: list[str] = []
    hints = _hints(func)
    for pname, param in inspect.signature(func).parameters.items():
        if pname in exclude or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        schema = schema_for_annotation(hints.get(pname))
        if schema is None:
            problems.append(f"parameter '{pname}' has an unsupported type {hints.get(pname)!r}")
            continue
        if pname in arg_docs:
            schema["description"] = arg_docs[pname]
        properties[pname] = schema
        if param.default is inspect.Parameter.empty:
            required.append(pname)
    return ParametersSchema.model_validate(
        {"properties": properties, "required": required}, strict=False
    ).model_dump(exclude_none=True), problems


def schema_for_annotation(annotation: Any) -> dict[str, Any] | None:
    """The parameter schema for a Python annotation, or None if it has no equivalent."""
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


def _with_signature_type(
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


def _short(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
