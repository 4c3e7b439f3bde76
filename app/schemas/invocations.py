"""POST /tools/{tool_id}/invoke: run one tool as a model would, without a model."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.schemas.chat import ContextArguments
from app.schemas.fields import MAX_JSON_DEPTH, BoundedJSON, ClientModel

# Why a tool call failed: also the `kind` label of the tool-error metric.
ErrorKind = Literal[
    "unknown_tool",
    "invalid_arguments",
    "missing_context",
    "timeout",
    "exception",
    "blocked",
    "unreachable",
    "upstream_status",
    "tool_error",
    "refused",  # a person refused the call (chats, approval before risky calls)
]


class InvokeRequest(ClientModel):
    arguments: dict[str, BoundedJSON] = Field(
        default_factory=dict,
        max_length=128,
        description="The tool's model-visible arguments, checked against its schema. Keys "
        "named like a context parameter are ignored: the server's value wins. Objects and "
        f"arrays nest at most {MAX_JSON_DEPTH} levels.",
    )
    context_arguments: ContextArguments = Field(
        default_factory=dict,
        description="Values for the tool's context parameters, as a chat would send them.",
    )

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [{"arguments": {"d": 6}, "context_arguments": {"user_id": "u-42"}}]
        }
    )


class InvokeError(BaseModel):
    kind: ErrorKind = Field(description="Why the call failed (also a metrics label).")
    message: str = Field(description="What a model would read, context values redacted.")


class InvokeResult(BaseModel):
    run_id: str
    tool_id: str
    status: Literal["ok", "error"]
    content: str | None = Field(
        description="The tool's output as a model reads it (capped, redacted); None on errors."
    )
    error: InvokeError | None
    duration_ms: float
    note: str | None = Field(
        default=None, description="Why the tool's `output.select` did not apply, if it did not."
    )
