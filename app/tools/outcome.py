"""What running a tool gave: text for the model, or an error it can read and correct."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from app.schemas.invocations import ErrorKind

__all__ = ["ErrorKind", "ToolFailure", "ToolOutcome", "unset_secret"]


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    status: Literal["ok", "error"]
    content: str
    kind: ErrorKind | None = None  # why an error happened (metrics, API answers)
    # An MCP tool's result as its server sent it (`content` blocks, `structuredContent`), for
    # `/mcp` to pass on (scrubbed by the invoker); `content` above is its text for a model.
    mcp: dict[str, Any] | None = None

    @classmethod
    def error(cls, message: str, kind: ErrorKind) -> ToolOutcome:
        return cls("error", message, kind)


class ToolFailure(Exception):
    """A function tool's failure of a known kind (the web built-ins' refusals are `blocked`):
    the function executor reports `kind` and the message as it is; any other exception is kind
    `exception`, named by its class."""

    def __init__(self, message: str, kind: ErrorKind = "exception") -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind


def unset_secret(name: str) -> str:
    return f"the secret '{name}' is not set for this tenant (PUT /secrets/{name})"
