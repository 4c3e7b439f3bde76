"""The one seam between the chat loop and a model: what it sends, gets back, and can fail with.

Swap the transport by writing another `ModelClient`; the loop does not change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from app.errors import AppError


@dataclass(frozen=True)
class ModelToolCall:
    id: str
    name: str
    arguments: str  # the JSON text exactly as the model sent it


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
        )


@dataclass(frozen=True)
class ModelTurn:
    content: str | None
    tool_calls: list[ModelToolCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)


class ModelClient(Protocol):
    async def complete(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        parallel_tool_calls: bool,
    ) -> ModelTurn: ...

    async def close(self) -> None: ...


class ModelError(AppError):
    """The model call failed; each subclass has the status the chat answers with."""


class ModelNotConfiguredError(ModelError):
    status_code = 503
    title = "Service Unavailable"


class ModelRateLimitedError(ModelError):
    status_code = 503
    title = "Service Unavailable"


class ModelUpstreamError(ModelError):
    status_code = 502
    title = "Bad Gateway"


class ModelTimeoutError(ModelError):
    status_code = 504
    title = "Gateway Timeout"


# One wording for every model client, so a failure reads the same whichever transport is used.
def credentials_rejected() -> ModelUpstreamError:
    return ModelUpstreamError(
        "The model endpoint rejected the service's credentials (check OPENAI_API_KEY)."
    )


def rate_limited(retry_after: str | None) -> ModelRateLimitedError:
    headers = {"Retry-After": retry_after} if retry_after and retry_after.isdigit() else None
    return ModelRateLimitedError(
        "The model endpoint is rate limiting requests; retry later.", headers=headers
    )


def upstream_status(status: int, message: str) -> ModelUpstreamError:
    return ModelUpstreamError(f"The model endpoint answered HTTP {status}: {message}")


def unreachable() -> ModelUpstreamError:
    return ModelUpstreamError("Cannot reach the model endpoint.")


def malformed_answer() -> ModelUpstreamError:
    return ModelUpstreamError("The model endpoint sent a malformed answer.")


def model_timed_out() -> ModelTimeoutError:
    return ModelTimeoutError("The model did not answer in time.")
