"""Tool documents: what admins send (`ToolCreate`, `ToolUpdate`) and what they get (`Tool`)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)
from pydantic.config import JsonDict
from pydantic.json_schema import SkipJsonSchema, WithJsonSchema

from app.schemas.fields import (
    ClientModel,
    Description,
    HeaderName,
    HeaderValue,
    Name,
    Tag,
    json_problem,
)

EnumValue = Annotated[str, StringConstraints(min_length=1, max_length=256)]
# An `enum` or `const` value of a parameter: any JSON scalar (strings up to 256 characters).
ScalarValue = Annotated[str, StringConstraints(max_length=256)] | bool | int | float

ParameterType = Literal["string", "integer", "number", "boolean", "array"]
SchemaType = Literal["string", "integer", "number", "boolean", "array", "object", "null"]
ToolType = Literal["function", "external"]
ApprovalMode = Literal["always", "never", "operator"]
APPROVAL_DOC = (
    "Chats: `always` stops the chat for a person's approval before each call of this tool "
    "(`stop_reason: approval_required`); `operator` stops it too, and the decision is the "
    "tenant key's (`POST /approvals/{approval_id}/decisions`), not a client token's whose "
    "chat stopped; `never` runs it at once. Unset: the category's `approval`, else `always` "
    "for tools marked `destructive_hint` and external `DELETE` tools (the operator's "
    "RISKY_TOOL_APPROVAL changes that), `never` for the others."
)
HttpMethod = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
Placement = Literal["path", "query", "header", "body"]
PLACEMENT_DOC = (
    "External tools: where the value goes. `path` fills `{name}` in the URL (percent-encoded "
    "within one segment), `query` a query parameter, `header` a request header of that name, "
    "`body` a member of the JSON body. Unset: the query for GET and DELETE, the body otherwise."
)


ParameterStyle = Literal["form", "spaceDelimited", "pipeDelimited", "deepObject", "simple"]
STYLE_DOC = (
    "External tools: how an array or object value is written (OpenAPI 3 `style` and "
    "`explode`). Query: `form` (default; exploded `a=1&a=2`, else `a=1,2`), `spaceDelimited`, "
    "`pipeDelimited`, `deepObject` (`a[k]=v`); path and header: `simple` (`1,2`)."
)
BodyType = Literal["json", "form", "multipart"]


# Arrays may be long, but a bound keeps every integer inside BSON's 64 bits and schemas sane.
MAX_ARRAY_BOUND = 100_000
Count = Annotated[int, Field(ge=0, le=MAX_ARRAY_BOUND)]
Bound = Annotated[float, Field(allow_inf_nan=False)] | int
# JSON levels a nested schema may take: `app/tools/schema.py` stops schemas at 24 subschemas
# deep (precise paths); this bounds what reaches it (and BSON's 100 levels).
MAX_SCHEMA_JSON_DEPTH = 80


def _schema_gate(value: Any) -> Any:
    problem = json_problem(value, max_depth=MAX_SCHEMA_JSON_DEPTH)
    if problem is not None:
        raise ValueError(problem)
    return value


# A nested JSON Schema: its keywords are checked by `app/tools/schema.py`, with paths.
Subschema = Annotated[dict[str, Any], AfterValidator(_schema_gate)]


class ParameterSchema(ClientModel):
    """One LLM-visible parameter: JSON Schema (draft 2020-12), the subset every major provider
    takes (docs/tools.md). Nested schemas (`properties`, `items`, `anyOf`, ...) use the same
    keywords. The seed's `min_items`/`max_items` are still read (top level only)."""

    model_config = ConfigDict(serialize_by_alias=True, populate_by_name=True)

    # One type or a list of them (`["string", "null"]`); checked with the other keywords.
    type: Annotated[
        Any,
        WithJsonSchema(
            {
                "anyOf": [
                    {"enum": list(get_args(SchemaType))},
                    {"type": "array", "items": {"enum": list(get_args(SchemaType))}},
                    {"type": "null"},  # as if absent: any type
                ]
            }
        ),
    ] = None
    description: Description | None = None
    title: Annotated[str, StringConstraints(max_length=256)] | None = None
    enum: list[ScalarValue | None] | None = Field(default=None, min_length=1, max_length=256)
    const: ScalarValue | None = None
    format: Annotated[str, StringConstraints(max_length=64)] | None = None
    pattern: Annotated[str, StringConstraints(max_length=1024)] | None = None
    minimum: Bound | None = None
    maximum: Bound | None = None
    exclusiveMinimum: Bound | None = None
    exclusiveMaximum: Bound | None = None
    multipleOf: Bound | None = None
    minLength: Count | None = None
    maxLength: Count | None = None
    minItems: Count | None = None
    maxItems: Count | None = None
    uniqueItems: bool | None = None
    items: Subschema | None = None
    properties: dict[str, Subschema] | None = Field(default=None, max_length=256)
    required: list[str] | None = Field(default=None, max_length=256)
    additionalProperties: bool | Subschema | None = None
    minProperties: Count | None = None
    maxProperties: Count | None = None
    anyOf: list[Subschema] | None = Field(default=None, min_length=1, max_length=64)
    oneOf: list[Subschema] | None = Field(default=None, min_length=1, max_length=64)
    allOf: list[Subschema] | None = Field(default=None, min_length=1, max_length=64)
    ref: str | None = Field(default=None, alias="$ref", max_length=256)
    default: Annotated[Any, AfterValidator(_schema_gate)] = None
    examples: Annotated[list[Any], AfterValidator(_schema_gate)] | None = Field(
        default=None, max_length=16
    )
    min_items: Count | None = None
    max_items: Count | None = None
    in_: Placement | None = Field(default=None, alias="in", description=PLACEMENT_DOC)
    style: ParameterStyle | None = Field(default=None, description=STYLE_DOC)
    explode: bool | None = Field(default=None, description=STYLE_DOC)


class ParametersSchema(ClientModel):
    """The model-visible parameters. A function tool's must match its function's signature:
    the same names, compatible types, `required` exactly those without a default."""

    model_config = ConfigDict(serialize_by_alias=True, populate_by_name=True)

    type: Literal["object"] = "object"
    properties: dict[Name, ParameterSchema] = Field(default_factory=dict, max_length=64)
    required: list[Name] = Field(
        default_factory=list,
        max_length=64,
        description="Names of required parameters; each must be a key of `properties`.",
    )
    defs: dict[Name, Subschema] | None = Field(
        default=None,
        alias="$defs",
        max_length=64,
        description='Schemas the parameters refer to as `{"$ref": "#/$defs/NAME"}`.',
    )


class FunctionSpec(ClientModel):
    """What the model sees of a tool, plus where an external tool lives."""

    name: Name
    description: Description = ""
    parameters: ParametersSchema = Field(default_factory=ParametersSchema)
    url: (
        Annotated[str, StringConstraints(pattern=r"^https?://[^\s/?#]+", max_length=2048)] | None
    ) = None
    method: HttpMethod | None = None
    body_type: BodyType | None = Field(
        default=None,
        description="External tools: how body members are sent: `json` (default), `form` "
        "(application/x-www-form-urlencoded) or `multipart` (multipart/form-data, no files).",
    )
    body_parameter: Name | None = Field(
        default=None,
        description="External tools: the parameter (placed in the body) whose value is the "
        "whole body, for a body that is not one object of named members (an array, a choice, a "
        "free-form object); no other parameter may be placed in the body then.",
    )
    headers: dict[HeaderName, HeaderValue] | None = Field(
        default=None,
        max_length=32,
        description="External tools: request headers. `{secret:NAME}` in a value is replaced "
        "by the tenant's secret NAME when the tool runs (`Bearer {secret:weather_key}`).",
    )

    @field_validator("method", mode="before")
    @classmethod
    def _upper_method(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value


# A preset's value: scalars and string lists, each bounded (BSON holds 64-bit integers at most).
PresetValue = (
    Annotated[str, StringConstraints(max_length=4096)]
    | Annotated[int, Field(ge=-(2**53), le=2**53)]
    | Annotated[float, Field(allow_inf_nan=False)]
    | bool
    | Annotated[list[Annotated[str, StringConstraints(max_length=4096)]], Field(max_length=256)]
)
# Outputs a tool may ask for: far above any sane ceiling, so a typo is a 422, not a giant row.
MAX_OUTPUT_CHARS = 1_000_000
MAX_TOOL_TIMEOUT_S = 600.0


class ContextParameter(ClientModel):
    """A value the server supplies at run time; the model never sees it."""

    model_config = ConfigDict(serialize_by_alias=True)

    name: Name
    type: ParameterType = "string"
    description: Description | None = None
    secret: Name | None = Field(
        default=None,
        description="Take the value from this tenant secret when the tool runs (never from the "
        "caller's context_arguments); the parameter's type must be string.",
    )
    value: PresetValue | None = Field(
        default=None,
        description="A preset: this fixed value, set here, is the argument on every call (never "
        "the caller's context_arguments, never shown to the model); it must be of `type`.",
    )
    in_: Placement | None = Field(default=None, alias="in", description=PLACEMENT_DOC)


# What the type of a tool implies for its `function`, stated in the schema so that clients (and
# the fuzzer) see it: external tools name an endpoint and a method; function tools do not.
_TYPE_RULES: JsonDict = {
    "if": {"properties": {"type": {"const": "external"}}, "required": ["type"]},
    "then": {
        "properties": {
            "function": {
                "required": ["url", "method"],
                "properties": {"url": {"type": "string"}, "method": {"type": "string"}},
            }
        }
    },
    "else": {
        "properties": {
            "function": {
                "properties": {
                    "url": {"type": "null"},
                    "method": {"type": "null"},
                    "headers": {"type": "null"},
                }
            }
        }
    },
}


Title = Annotated[str, StringConstraints(min_length=1, max_length=128)]


class ToolAnnotations(ClientModel):
    """Hints for clients about what the tool does, served as MCP tool annotations
    (`readOnlyHint` and the others); never trusted for a security decision."""

    read_only_hint: bool | None = Field(default=None, description="It changes nothing.")
    destructive_hint: bool | None = Field(
        default=None, description="It may destroy or overwrite data (when not read-only)."
    )
    idempotent_hint: bool | None = Field(
        default=None, description="Calling it again with the same arguments changes nothing more."
    )
    open_world_hint: bool | None = Field(
        default=None, description="It reaches an open world (the web), not a closed system."
    )


class ToolOutput(ClientModel):
    """What of a tool's result the model sees: `select` (a JMESPath expression) is applied to a
    JSON result, then the text is cut at `max_chars` (under TOOL_OUTPUT_MAX_CHARS)."""

    select: Annotated[str, StringConstraints(min_length=1, max_length=1024)] | None = Field(
        default=None,
        description="A JMESPath expression applied to a JSON result (`items[].{id: id}`); a "
        "result it does not apply to is left as it is, and the run record says so.",
    )
    max_chars: Annotated[int, Field(ge=1, le=MAX_OUTPUT_CHARS)] | None = Field(
        default=None, description="Cut the output here (at most TOOL_OUTPUT_MAX_CHARS)."
    )


class ToolFields(ClientModel):
    model_config = ConfigDict(json_schema_extra=_TYPE_RULES)

    type: ToolType
    function: FunctionSpec
    context_parameters: list[ContextParameter] = Field(default_factory=list, max_length=32)
    tags: list[Tag] = Field(default_factory=list, max_length=32)
    category: Name = Field(
        default="default",
        description="The tool's category (`/categories`): offered to chats while it is enabled.",
    )
    output: ToolOutput | None = None
    timeout_s: Annotated[float, Field(gt=0, le=MAX_TOOL_TIMEOUT_S)] | None = Field(
        default=None, description="This tool's timeout (at most TOOL_TIMEOUT_S, the default)."
    )
    enabled: bool = True
    title: Title | None = Field(default=None, description="A name for people (MCP `title`).")
    annotations: ToolAnnotations | None = None
    approval: ApprovalMode | None = Field(default=None, description=APPROVAL_DOC)


class ToolCreate(ToolFields):
    """A new tool."""

    tool_id: Name


class ToolUpdate(ToolFields):
    """A full replacement of a tool; `tool_id`, if given, must equal the one in the path."""

    tool_id: Name | None = None


class StoredTool(ToolFields):
    """A tool document as read back from the database: checked again, since anything may have
    written it; fields this version does not know are ignored."""

    model_config = ConfigDict(extra="ignore", strict=False)

    tool_id: Name
    created_at: datetime
    updated_at: datetime


class Tool(BaseModel):
    """A stored tool, as returned to admins."""

    tool_id: str
    type: ToolType
    function: FunctionSpec
    context_parameters: list[ContextParameter]
    tags: list[str]
    category: str = "default"
    output: ToolOutput | None = None
    timeout_s: float | None = None
    enabled: bool
    title: str | None = None
    annotations: ToolAnnotations | None = None
    approval: ApprovalMode | None = Field(default=None, description=APPROVAL_DOC)
    created_at: datetime
    updated_at: datetime
    incompatible_providers: dict[str, list[str]] | None = Field(
        default=None,
        description="Providers whose tool format cannot express this tool, with the reasons.",
    )


class UnreadableTool(BaseModel):
    """A stored tool this server cannot read (written by another version, or by hand): listed so
    it can be fixed (PUT) or deleted, but never offered to a model."""

    tool_id: str
    type: str | None = None
    enabled: bool | None = None
    problems: list[str] = Field(description="Why the stored document cannot be used.")


class ToolPage(BaseModel):
    """One page of a tenant's tools."""

    items: list[Tool | UnreadableTool]
    total: int
    limit: int
    offset: int


class ToolId(BaseModel):
    tool_id: str
    name: str | None = Field(default=None, description="Absent for a tool that cannot be read.")
    type: ToolType | None = None
    enabled: bool
    problems: list[str] | None = Field(
        default=None, description="Why the stored document cannot be read (see GET /tools/{id})."
    )


class ToolImport(ClientModel):
    """`POST /tools/import`: external tools from an OpenAPI 3.0 or 3.1 document (Swagger 2.0 is
    converted first), one per operation. Give the document as JSON (`document`), as JSON or
    YAML text (`document_text`), or as a `url` the service fetches through the outbound guard."""

    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [{"required": [one]} for one in ("document", "document_text", "url")]
        }
    )

    document: dict[str, Any] | SkipJsonSchema[None] = None
    document_text: (
        Annotated[str, StringConstraints(max_length=4_194_304)] | SkipJsonSchema[None]
    ) = None
    url: (
        Annotated[str, StringConstraints(pattern=r"^https?://[^\s]+$", max_length=2048)]
        | SkipJsonSchema[None]
    ) = None
    operation_ids: list[Annotated[str, StringConstraints(max_length=256)]] | None = Field(
        default=None, max_length=1000, description="Only these operations (by operationId)."
    )
    openapi_tags: list[Annotated[str, StringConstraints(max_length=256)]] | None = Field(
        default=None, max_length=100, description="Only operations with one of these tags."
    )
    prefix: Annotated[str, StringConstraints(pattern=r"^[a-zA-Z0-9_-]{0,32}$")] = Field(
        default="", description="Put before every tool id and name (`shop_`)."
    )
    server_url: (
        Annotated[str, StringConstraints(pattern=r"^https?://[^\s]+$", max_length=2048)] | None
    ) = Field(default=None, description="Default: the document's first server.")
    tags: list[Tag] = Field(default_factory=list, max_length=32, description="Tags to add.")
    category: Name = Field(
        default="default",
        description="The category of every imported tool (`/categories`; it must exist): "
        "enabling or disabling it turns the whole API on or off in chats, and deleting it "
        "removes the imported tools.",
    )
    security: dict[Annotated[str, StringConstraints(max_length=256)], Name] = Field(
        default_factory=dict,
        max_length=32,
        description="Security scheme name -> tenant secret whose value is sent: an API key in "
        "its header or query parameter, `Bearer <value>` for http bearer and OAuth 2 (a token "
        "obtained elsewhere), `Basic <value>` for http basic (the value is the base64 "
        "credentials).",
    )
    dry_run: bool = Field(
        default=False, description="Return the tools and problems; store nothing."
    )

    @model_validator(mode="after")
    def _no_explicit_null(self) -> ToolImport:
        for name in ("document", "document_text", "url"):
            if name in self.model_fields_set and getattr(self, name) is None:
                raise ValueError(f"'{name}' may not be null: leave it out")
        return self


ImportStage = Literal["conversion", "rules"]


class ImportSkip(BaseModel):
    """An operation that did not become a tool, and why: conversion could not express a
    required part (`conversion`), or the tool built breaks a rule of `POST /tools/create`
    (`rules`: a taken id or name, its size, ...)."""

    operation: str = Field(description="`METHOD /path` (`* /path` for a whole path item).")
    operation_id: str = ""
    reason: str
    stage: ImportStage
    tool_id: str | None = Field(default=None, description="The tool refused by the rules.")


class ImportNote(BaseModel):
    """An optional part of an operation left out of its tool (or shown loosely), and why."""

    operation: str
    tool_id: str
    note: str


class ImportVerdict(BaseModel):
    """One selected operation's outcome, in document order (skips last)."""

    operation: str
    operation_id: str = ""
    verdict: Literal["stored", "ready", "skipped"] = Field(
        description="`stored`: its tool was stored; `ready`: its tool passed every check but was "
        "not stored (a dry run, or an import refused as a whole: see `problems`); `skipped`: "
        "see `reason`."
    )
    tool_id: str | None = None
    reason: str | None = None
    stage: ImportStage | None = None


class ImportSummary(BaseModel):
    """The counts a progress view shows."""

    operations: int = Field(description="Operations selected.")
    converted: int = Field(description="Operations a tool was built for.")
    stored: int = Field(description="Tools stored (0 in a dry run).")
    skipped: int = Field(description="Operations skipped, with their reasons.")
    cpu_s: float = Field(description="CPU seconds the worker spent reading and converting.")


class ImportResult(BaseModel):
    """`POST /tools/import`'s answer (and its dry run's): a verdict per operation."""

    dry_run: bool
    summary: ImportSummary
    tools: list[dict[str, Any]] = Field(
        description="The tools stored (or, in a dry run, that would be), as `GET /tools/{id}`."
    )
    skipped: list[ImportSkip]
    notes: list[ImportNote]
    operations: list[ImportVerdict]
    problems: list[dict[str, str]] = Field(
        description="What refuses the import as a whole (the category, the tenant's tool cap), "
        "each with its JSON path; a dry run lists them, an import answers 422."
    )


MAX_PRESETS = 32


class McpToolSettings(ClientModel):
    """The settings of an MCP server's tool, stored by its `{server}__{tool}` id: what a stored
    tool's document says of itself, for a tool whose definition its server keeps."""

    type: Literal["mcp"]
    category: Name = Field(
        default="default",
        description="The tool's category (`/categories`): offered to chats while it is enabled.",
    )
    enabled: bool = True
    output: ToolOutput | None = None
    timeout_s: Annotated[float, Field(gt=0, le=MAX_TOOL_TIMEOUT_S)] | None = Field(
        default=None, description="This tool's timeout (at most TOOL_TIMEOUT_S, the default)."
    )
    approval: ApprovalMode | None = Field(default=None, description=APPROVAL_DOC)
    presets: dict[Name, PresetValue] = Field(
        default_factory=dict,
        max_length=MAX_PRESETS,
        description="Arguments of the tool set here, on every call: the model never sees them "
        "(nor a caller's context_arguments) and the server's value for them is this one.",
    )


class McpToolSettingsView(BaseModel):
    """An MCP tool's stored settings, as returned to admins."""

    tool_id: str
    type: Literal["mcp"] = "mcp"
    server: str
    mcp_tool: str
    category: str
    enabled: bool
    output: ToolOutput | None = None
    timeout_s: float | None = None
    approval: ApprovalMode | None = None
    presets: dict[str, Any]
    updated_at: datetime
