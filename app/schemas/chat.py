"""POST /chat: the conversation a frontend sends and what it gets back."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints

from app.schemas.fields import (
    MAX_JSON_DEPTH,
    BoundedJSON,
    ClientModel,
    Name,
    ServerName,
    Tag,
    WholeNumber,
)
from app.schemas.runs import Usage

ContextValue = str | int | float | bool | list[str]
# Keys are context parameter names; the schema says so (no other key is accepted).
ContextArguments = Annotated[
    dict[Name, ContextValue],
    Field(max_length=64, json_schema_extra={"additionalProperties": False}),
]


class FunctionCall(ClientModel):
    name: str
    arguments: str


class MessageToolCall(ClientModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(ClientModel):
    """A message in OpenAI chat format."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, BoundedJSON]] | None = Field(
        default=None,
        description=f"Text, or content parts; objects and arrays nest at most {MAX_JSON_DEPTH} "
        "levels inside a part.",
    )
    name: Annotated[str, StringConstraints(max_length=64)] | None = None
    tool_calls: list[MessageToolCall] | None = None
    tool_call_id: str | None = None


CallId = Annotated[str, StringConstraints(min_length=1, max_length=256)]


class ApprovalDecision(ClientModel):
    """A person's decision on a call the chat stopped for (`stop_reason: approval_required`)."""

    call_id: CallId = Field(description="The `id` of a call in `pending_approvals`.")
    approved: bool
    reason: Annotated[str, StringConstraints(max_length=2000)] | None = Field(
        default=None, description="Why; a refusal's reason is what the model reads."
    )
    tool: Annotated[str, StringConstraints(max_length=256)] | None = Field(
        default=None, description="If given, must be the pending call's tool (a check)."
    )
    arguments: dict[str, BoundedJSON] | None = Field(
        default=None,
        max_length=128,
        description="If given, must equal the pending call's arguments, as the decision was "
        "shown them (a check that the conversation was not changed in between).",
    )


class ChatRequest(ClientModel):
    messages: list[ChatMessage] = Field(min_length=1, max_length=1000)
    context_arguments: ContextArguments = Field(
        default_factory=dict,
        description="Values for the tools' context parameters; never shown to the model.",
    )
    tool_ids: list[Name] | None = Field(
        default=None, max_length=128, description="Default: all enabled tools of the tenant."
    )
    tags: list[Tag] | None = Field(
        default=None, max_length=32, description="Only tools with at least one of these tags."
    )
    mcp_servers: list[ServerName] | None = Field(
        default=None,
        max_length=16,
        description="MCP servers whose tools join the chat, named `{server}__{tool}`.",
    )
    provider: Name | None = Field(
        default=None,
        description="One of the tenant's model providers (/model-providers); default: the "
        "tenant's default provider, else the operator's model endpoint.",
    )
    model: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    max_iterations: Annotated[int, Field(ge=1, le=1000), WholeNumber] | None = None
    parallel_tool_calls: bool = True
    category_hints: bool = Field(
        default=True,
        description="Send the usage hints of the offered tools' categories as one system "
        "message (`GET /categories/hints` shows it); false: send none.",
    )
    stream: bool = Field(
        default=False,
        description="Answer with server-sent events (also: Accept: text/event-stream).",
    )
    approvals: list[ApprovalDecision] = Field(
        default_factory=list,
        max_length=128,
        description="Decisions on the calls a previous answer stopped for: send the "
        "conversation back (its `messages`) with one decision per pending call.",
    )


class GivenApproval(BaseModel):
    approved: bool
    reason: str | None = None


class ToolCallResult(BaseModel):
    id: str
    name: str
    arguments: Any
    status: Literal["ok", "error"]
    error: str | None = None
    duration_ms: float
    note: str | None = Field(
        default=None, description="Why the tool's `output.select` did not apply, if it did not."
    )
    approval: GivenApproval | None = Field(
        default=None, description="The person's decision, for a call that waited for one."
    )


class PendingApproval(BaseModel):
    """A call the chat stopped before running: it waits for a person's decision."""

    id: str
    tool: str
    arguments: Any = Field(description="As the model sent them (context values never shown).")
    decided_by: Literal["caller", "operator"] = Field(
        default="caller",
        description="`caller`: decide it in `approvals` when sending the conversation back; "
        "`operator`: the tenant key decides it (`POST /approvals/{approval_id}/decisions`), "
        "then the conversation is sent back without a decision for it.",
    )


class SkippedServer(BaseModel):
    name: str
    reason: str


class ChatResponse(BaseModel):
    run_id: str
    message: dict[str, Any]
    messages: list[dict[str, Any]]
    stop_reason: Literal[
        "completed", "max_iterations", "token_budget", "approval_required", "no_answer"
    ] = Field(
        description="`max_iterations`: the chat made its `max_iterations` model calls; the "
        "last one offered the tools but allowed no call, and `message` is its answer. "
        "`token_budget`: the model's reported usage passed CHAT_TOKEN_BUDGET, so "
        "the tool calls of its last turn were not run. `approval_required`: the model called "
        "a tool that waits for a person's approval; none of that turn's calls ran "
        "(`pending_approvals`); continue with `approvals`. `no_answer`: the model's last turn "
        "carried no text (`message.content` is empty): it answered nothing, or, on the last "
        "turn, still asked for tools (`finish_reason` says so; those calls were not run)."
    )
    iterations: int
    tool_calls: list[ToolCallResult]
    usage: Usage
    finish_reason: str | None = Field(
        default=None,
        description="Why the model stopped its last turn, the same words on every model API: "
        "`stop`, `tool_calls`, `length` (its output limit: the answer may be cut short), "
        "`refusal`, `content_filter`; None when the endpoint did not say.",
    )
    skipped_mcp_servers: list[SkippedServer] = Field(
        default_factory=list,
        description="MCP servers of the chat that could not be reached: their tools were left "
        "out, and the chat went on without them.",
    )
    pending_approvals: list[PendingApproval] = Field(
        default_factory=list, description="With `approval_required`: the calls waiting."
    )
