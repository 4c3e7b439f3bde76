"""Chat run records as admins read them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field

RunKind = Literal["chat", "invoke", "mcp"]
RunStatus = Literal[
    "completed",
    "max_iterations",
    "token_budget",
    "approval_required",
    "no_answer",
    "cancelled",
    "error",
]


class RunToolCall(BaseModel):
    id: str
    name: str
    tool_id: str | None = None
    status: Literal["ok", "error"]
    duration_ms: float
    started_ms: float | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="When the call started, in ms from the run's start (records written "
        "before this field have none).",
    )
    arguments: Any  # as the model sent them; never context values
    note: str | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="Why the tool's `output.select` did not apply, if it did not.",
    )
    approval: dict[str, Any] | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="The person's decision (`approved`, `reason`), for a call that waited.",
    )


class RunModelCall(BaseModel):
    """A chat's call of the model, on the run's timeline."""

    started_ms: float = Field(description="From the run's start.")
    duration_ms: float
    status: Literal["ok", "error"] = Field(description="`error`: it failed or was cancelled.")
    total_tokens: int | None = Field(default=None, exclude_if=lambda value: value is None)


class RunApproval(BaseModel):
    """An approval of a chat: a call that waited, and what a person decided."""

    call_id: str
    tool: str
    arguments: Any
    decision: Literal["pending", "approved", "refused"]
    reason: str | None = None


class RunSearch(BaseModel):
    """One `search_tools` call of a chat over a large catalog."""

    query: str
    revealed: list[str] = Field(description="The tools it added to the chat, best first.")


class Usage(BaseModel):
    """Tokens the model reported, summed over a run's turns (a chat's answer and its record)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class Run(BaseModel):
    run_id: str
    kind: RunKind = Field(
        default="chat",
        description="`chat`: POST /chat; `invoke`: one tool run by POST /tools/{tool_id}/invoke; "
        "`mcp`: one `tools/call` on the MCP endpoint.",
    )
    started_at: datetime
    ended_at: datetime
    model: str | None = Field(default=None, description="The model of a chat; None otherwise.")
    provider: str | None = Field(
        default=None,
        description="The tenant's model provider a chat went through; None: the operator's.",
    )
    stop_reason: RunStatus
    error: str | None = Field(default=None, exclude_if=lambda value: value is None)
    iterations: int
    usage: Usage
    finish_reason: str | None = Field(
        default=None,
        description="Why the model stopped its last turn, the same words on every model API: "
        "`stop`, `tool_calls`, `length` (its output limit: the answer may be cut short), "
        "`refusal`, `content_filter`; None when the endpoint did not say.",
    )
    tool_calls: list[RunToolCall]
    model_calls: list[RunModelCall] | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="Chats: each model call, in order, with when it started and how long it "
        "took (records written before this field have none).",
    )
    messages: list[dict[str, Any]] | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="Only when RUN_STORE_MESSAGES is on.",
    )
    approvals: list[RunApproval] | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="Chats: each call that waited for a person's approval (`pending` when the "
        "chat stopped for it) and each decision taken on one.",
    )
    searches: list[RunSearch] | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="Chats over large catalogs: each `search_tools` call and the tools it "
        "revealed.",
    )


class RunPage(BaseModel):
    items: list[Run]
    next_cursor: str | None


class ToolStats(BaseModel):
    tool_id: str
    since: datetime
    until: datetime
    calls: int
    errors: int
    error_rate: float
    p50_ms: float | None
    p95_ms: float | None


def _iso_only(value: object) -> object:
    """Pydantic would read `0.5` as a Unix time; the schema promises ISO 8601 date-times."""
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        raise ValueError("must be an ISO 8601 date-time, such as 2026-01-31T12:00:00Z")
    return value


def _in_utc(value: datetime) -> datetime:
    """In UTC (a time without an offset is read as UTC); 422, not an overflow later, for a time
    whose UTC equivalent falls outside years 1-9999 (`0001-01-01T00:00:00+01:00`)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("is outside the years 1 to 9999 once converted to UTC") from None


_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
IsoDateTime = Annotated[datetime, BeforeValidator(_iso_only), AfterValidator(_in_utc)]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunQuery:
    """Which runs a page lists, newest first; `after` is the (started_at, run_id) of the last
    run already seen (decoded from a cursor)."""

    limit: int = 50
    after: tuple[datetime, str] | None = None
    tool_id: str | None = None
    tool_name: str | None = None
    status: str | None = None
    since: datetime | None = None
    until: datetime | None = None
