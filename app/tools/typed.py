"""Typed tools: each stored document parsed once, when a tenant's catalog is loaded.

A typed tool carries everything a call needs that does not change between calls: the schema the
model sees, the context slots, the secrets it reads and its executor's settings. The hot path
reads attributes; nothing here is looked up per call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import orjson
from jmespath.parser import ParsedResult
from pydantic import ValidationError

from app.schemas.fields import Provider, problem_lines
from app.schemas.tools import ApprovalMode, StoredTool
from app.tools.providers import provider_problems, shaped
from app.tools.rules import SECRET_REFERENCE, compiled_select, definition_problems
from app.tools.schema import compiled, parameters_json_schema

ToolKind = Literal["function", "external", "mcp"]


@dataclass(frozen=True, slots=True)
class ContextSlot:
    """A value the server supplies at run time, and the argument it fills."""

    name: str  # the key in the caller's context_arguments
    argument: str  # the argument it becomes (the same name, but for mapped MCP arguments)
    required: bool
    schema: dict[str, Any] | None = None  # checks the value; None: the tool's server checks
    secret: str | None = None  # the value comes from this tenant secret, never the caller
    preset: Any = None  # the value set in the tool document (never None when set), never the caller


@dataclass(frozen=True, slots=True, kw_only=True)
class TypedTool:
    """A tool parsed once, ready to be offered and called: what the model sees (`name`,
    `description`, `json_parameters`, the chat-completions `schema`), what the server fills in
    (`context` slots, `secrets`), and which executor runs it (`kind`). Subclasses add what their
    executor needs: `FunctionTool` nothing, `ExternalTool` the endpoint, `McpServerTool` the
    server and its name there. Built by `parse_stored_tool` (stored tools) and
    `app/mcp/` (MCP tools); immutable, so one instance serves every concurrent call."""

    tool_id: str
    name: str
    description: str
    enabled: bool = True
    tags: frozenset[str] = frozenset()
    # The model-visible parameters in the stored vocabulary, checked before a run; None when the
    # tool's own server checks them (MCP).
    parameters: dict[str, Any] | None
    json_parameters: dict[str, Any]  # the same as JSON Schema, as models and clients see it
    context: tuple[ContextSlot, ...] = ()
    secrets: frozenset[str] = frozenset()  # tenant secrets it reads when it runs
    incompatible_providers: dict[str, list[str]] = field(default_factory=dict)
    title: str | None = None
    annotations: dict[str, bool] | None = None  # MCP tool annotations, snake_case names
    category: str = "default"  # stored tools: its category (`/categories`); MCP tools: default
    # Output shaping (`output` in the tool document): a JMESPath expression for JSON results and
    # a cut under the operator's cap; `timeout_s` under the operator's timeout.
    output_select: ParsedResult | None = None
    output_max_chars: int | None = None
    timeout_s: float | None = None
    approval: ApprovalMode | None = None  # None: decided by `risky` and the operator's default
    # The compiled check of `json_parameters` (built once per tool version); None when the
    # tool's own server checks them (MCP).
    validator: Any = field(init=False, compare=False, repr=False)
    schema: dict[str, Any] = field(init=False)  # the chat-completions `tools` entry
    # `schema` serialized, built with the tool: a model request joins these bytes instead of
    # serializing every offered schema on every call (app/chat/model.py, `PreparedTools`).
    schema_json: bytes = field(init=False, compare=False, repr=False)
    _formats: dict[str, dict[str, Any]] = field(init=False, compare=False, repr=False)
    hidden_names: frozenset[str] = field(init=False)  # arguments a caller's model may not set

    kind: ClassVar[ToolKind]
    # Runs over the tenant's outbound HTTP client (its allow list): the toolbox hands one over.
    uses_http: ClassVar[bool] = False

    def __post_init__(self) -> None:
        schema = shaped("openai", self.name, self.description, self.json_parameters)
        object.__setattr__(self, "schema", schema)
        object.__setattr__(self, "schema_json", orjson.dumps(schema))
        object.__setattr__(self, "_formats", {"openai": schema})
        checked = self.parameters is not None
        object.__setattr__(self, "validator", compiled(self.json_parameters) if checked else None)
        hidden = {c.name for c in self.context} | {c.argument for c in self.context}
        object.__setattr__(self, "hidden_names", frozenset(hidden))

    @property
    def risky(self) -> bool:
        """It says it may destroy data: without its own `approval`, a person approves it."""
        return _marked_destructive(self.annotations)

    def route(self) -> tuple[str, str] | None:
        """(HTTP method, URL) of a tool that calls an HTTP endpoint; None for the others (what
        tool search reads of its path and method)."""
        return None

    def in_format(self, provider: Provider) -> dict[str, Any]:
        """This tool in `provider`'s tool format (for Gemini, converted where it can be);
        each format built once, at its first use."""
        found = self._formats.get(provider)
        if found is None:
            found = self._formats[provider] = shaped(
                provider,
                self.name,
                self.description,
                self.json_parameters,
                # A passed-through MCP schema that Gemini cannot take is sent as it is.
                gemini_convert=self.kind != "mcp" or "gemini" not in self.incompatible_providers,
            )
        return found


@dataclass(frozen=True, slots=True, kw_only=True)
class FunctionTool(TypedTool):
    """A function of the server's function dictionary, looked up by `name` when it runs."""

    kind: ClassVar[ToolKind] = "function"
    # A function may reach the web (web_fetch) through the tenant's client (its allow list).
    uses_http: ClassVar[bool] = True


@dataclass(frozen=True, slots=True, kw_only=True)
class ExternalTool(TypedTool):
    """An HTTP endpoint: `url` (path templates filled from arguments), `method`, header
    templates and where each argument goes."""

    url: str
    method: str
    headers: dict[str, str] | None = None  # templates: `{secret:NAME}` filled at run time
    # argument name -> path | query | header | body; None (and names absent): the seed's rule
    placements: dict[str, str] | None = None
    styles: dict[str, tuple[str | None, bool | None]] | None = None  # name -> (style, explode)
    body_type: str = "json"  # json | form | multipart
    body_parameter: str | None = None  # its value is the whole body
    sends_body: bool = False  # it has body members: a body (`{}` at least) is always sent

    kind: ClassVar[ToolKind] = "external"
    uses_http: ClassVar[bool] = True

    @property
    def risky(self) -> bool:
        return self.method == "DELETE" or _marked_destructive(self.annotations)

    def route(self) -> tuple[str, str] | None:
        return self.method, self.url


@dataclass(frozen=True, slots=True, kw_only=True)
class McpServerTool(TypedTool):
    """A tool an MCP server lists, offered as `{server}__{tool}`; its server checks the
    arguments (`parameters` is None)."""

    server: str
    mcp_tool: str  # its name on the server
    output_schema: dict[str, Any] | None = None  # the server's `outputSchema`, served as it is
    execution: dict[str, Any] | None = None  # the server's `execution` field, likewise

    kind: ClassVar[ToolKind] = "mcp"


def _marked_destructive(annotations: dict[str, bool] | None) -> bool:
    return bool(annotations and annotations.get("destructive_hint") is True)


class UnreadableToolError(Exception):
    """A stored document this version cannot run; `problems` says why, field by field."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


DefaultsOf = Callable[[str], frozenset[str]]


def parse_stored_tool(
    doc: dict[str, Any],
    *,
    defaults_of: DefaultsOf | None = None,
    unavailable: Callable[[str], bool] | None = None,
) -> tuple[StoredTool, FunctionTool | ExternalTool]:
    """The stored document checked and typed; `defaults_of(function name)` names the parameters
    a server function gives a default (its context ones may be absent); a function tool whose
    function is `unavailable(name)` (a capability the server lacks) is typed as disabled."""
    try:
        stored = StoredTool.model_validate(doc)
    except ValidationError as exc:
        raise UnreadableToolError(problem_lines(exc)) from None
    function, output = stored.function, stored.output
    found = definition_problems(stored, policy=None)  # the connection is guarded at call time
    if found:
        raise UnreadableToolError([f"{path}: {message}" for path, message in found])
    optional = defaults_of(function.name) if defaults_of and stored.type == "function" else None
    context = tuple(
        ContextSlot(
            name=c.name,
            argument=c.name,
            required=optional is None or c.name not in optional,
            schema=c.model_dump(
                exclude_none=True, exclude={"name", "description", "secret", "value", "in_"}
            ),
            secret=c.secret,
            preset=c.value,
        )
        for c in stored.context_parameters
    )
    parameters = function.parameters.model_dump(exclude_none=True)
    json_parameters = parameters_json_schema(parameters)
    secrets = {c.secret for c in context if c.secret}
    for value in (function.headers or {}).values():
        secrets.update(SECRET_REFERENCE.findall(value))
    common: dict[str, Any] = {
        "tool_id": stored.tool_id,
        "name": function.name,
        "description": function.description,
        "enabled": stored.enabled
        and not (unavailable and stored.type == "function" and unavailable(function.name)),
        "tags": frozenset(stored.tags),
        "parameters": parameters,
        "json_parameters": json_parameters,
        "context": context,
        "secrets": frozenset(secrets),
        "incompatible_providers": provider_problems(function.name, json_parameters),
        "title": stored.title,
        "annotations": (
            stored.annotations.model_dump(exclude_none=True) if stored.annotations else None
        ),
        "category": stored.category,
        "output_select": compiled_select(output.select) if output and output.select else None,
        "output_max_chars": output.max_chars if output else None,
        "timeout_s": stored.timeout_s,
        "approval": stored.approval,
    }
    if stored.type == "function":
        return stored, FunctionTool(**common)
    assert function.url is not None and function.method is not None  # definition_problems
    headers = dict(function.headers) if function.headers else None
    placed: dict[str, str] = {
        name: p.in_ for name, p in function.parameters.properties.items() if p.in_
    }
    placed |= {c.name: c.in_ for c in stored.context_parameters if c.in_}
    styles: dict[str, tuple[str | None, bool | None]] = {
        name: (p.style, p.explode)
        for name, p in function.parameters.properties.items()
        if p.style is not None or p.explode is not None
    }
    default = "query" if function.method in ("GET", "DELETE") else "body"
    names = [*function.parameters.properties, *(c.name for c in stored.context_parameters)]
    return stored, ExternalTool(
        **common,
        url=function.url,
        method=function.method,
        headers=headers,
        placements=placed or None,
        styles=styles or None,
        body_type=function.body_type or "json",
        body_parameter=function.body_parameter,
        sends_body=function.body_parameter is None
        and any(placed.get(name, default) == "body" for name in names),
    )
