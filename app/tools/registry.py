"""The server's function dictionary: Python callables that `function` tools may name.

Definitions are built from a function's signature and its Google-style docstring, or supplied
by hand. Registration never raises: `validate_registry` collects every problem so start-up can
refuse with one complete list.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypedDict, TypeVar, Unpack, overload

from pydantic import TypeAdapter, ValidationError

from app.schemas.fields import NAME_PATTERN
from app.schemas.tools import ContextParameter, FunctionSpec, ToolFields
from app.tools.rules import definition_problems, signature_problems
from app.tools.signature import (
    argument_adapters,
    build_parameters,
    parse_docstring,
    with_signature_type,
)

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class ToolRequest:
    """What a post-processor is told of the call whose result it shapes."""

    tool_id: str
    name: str
    arguments: dict[str, Any]  # as the function got them (context values and presets merged)


# `(request, result) -> result`: runs right after the function, where it ran (a worker thread
# for blocking functions), before the result becomes text; redaction still runs after it.
PostProcessor = Callable[[ToolRequest, Any], Any]


@dataclass(frozen=True)
class RegisteredFunction:
    """A callable with the tool definition it is exposed under."""

    func: Callable[..., Any]
    tool_id: str
    function: FunctionSpec
    context_parameters: tuple[ContextParameter, ...] = ()
    tags: tuple[str, ...] = ()
    category: str = "default"
    postprocess: PostProcessor | None = None
    build_problems: tuple[str, ...] = field(default=())
    # A plain function runs in the tool thread pool unless it says it never blocks: then it runs
    # on the event loop, with no thread hand-off (docs/performance.md, "Where the time goes").
    blocking: bool = True
    # A capability of the server it needs (`web_search`, `web_fetch`): without it, the tool is
    # seeded like the others but never offered (`Settings.capabilities`).
    requires: str | None = None

    @property
    def name(self) -> str:
        return self.function.name

    @cached_property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.func)

    @cached_property
    def is_generator(self) -> bool:
        """It yields `Progress` before its result (app/tools/progress.py), plain or async."""
        return inspect.isgeneratorfunction(self.func) or inspect.isasyncgenfunction(self.func)

    @cached_property
    def defaulted_parameters(self) -> frozenset[str]:
        """Parameters the function gives a default: context ones among them may be absent."""
        signature = inspect.signature(self.func)
        return frozenset(n for n, p in signature.parameters.items() if p.default is not p.empty)

    @cached_property
    def adapters(self) -> dict[str, TypeAdapter[Any]]:
        """Parameters taken as more than JSON (a model, a dataclass): their adapters."""
        return argument_adapters(self.func, self.function.parameters.properties)

    def typed_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The model's JSON arguments as the function's annotations take them (pydantic's
        `ValidationError` when they cannot be)."""
        adapters = self.adapters
        if not adapters:
            return arguments
        return {
            name: adapters[name].validate_python(value) if name in adapters else value
            for name, value in arguments.items()
        }

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
            "category": self.category,
            "enabled": True,
        }


class RegisterOptions(TypedDict, total=False):
    name: str
    tool_id: str
    description: str
    parameters: dict[str, Any]
    context_parameters: Sequence[str | dict[str, Any]]
    tags: Sequence[str]
    blocking: bool
    category: str
    postprocess: PostProcessor
    requires: str


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
        A plain (non-async) function runs in the tool thread pool; `blocking=False` runs it on
        the event loop instead: only for quick functions that never wait on anything.
        `category` is the category its tool is seeded in (created in each tenant, enabled, if
        absent); `postprocess(request, result) -> result` shapes each result (a plain function).
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
                options.get("blocking", True),
                category=options.get("category", "default"),
                postprocess=options.get("postprocess"),
                requires=options.get("requires"),
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
        blocking: bool = True,
        *,
        category: str = "default",
        postprocess: PostProcessor | None = None,
        requires: str | None = None,
    ) -> None:
        fname = name or func.__name__
        if fname in self._functions:
            self._problems.append(f"{fname}: registered twice")
            return
        summary, arg_docs = parse_docstring(func)
        context_specs = [c if isinstance(c, dict) else {"name": c} for c in context_parameters]
        context_names = {str(c.get("name")) for c in context_specs}
        problems: list[str] = []
        if postprocess is not None and (
            not callable(postprocess) or inspect.iscoroutinefunction(postprocess)
        ):
            problems.append("postprocess must be a plain function (request, result) -> result")
        if not isinstance(category, str) or not re.fullmatch(NAME_PATTERN, category):
            problems.append(f"category {category!r} is not a valid name ({NAME_PATTERN})")
        if parameters is None:
            parameters, built_problems = build_parameters(func, arg_docs, exclude=context_names)
            problems += built_problems
        context_specs = [with_signature_type(func, spec, arg_docs) for spec in context_specs]
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
            blocking=blocking,
            category=category,
            postprocess=postprocess,
            requires=requires,
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
            tool = ToolFields.model_construct(  # parts validated already
                type="function",
                function=entry.function,
                context_parameters=list(entry.context_parameters),
            )
            found += [f"{p}: {m}" for p, m in definition_problems(tool, policy=None)]
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


def _short(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
