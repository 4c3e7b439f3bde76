"""The model APIs a `HTTPModelClient` speaks, by name (MODEL_API, a tenant provider's `api`)."""

from __future__ import annotations

from typing import Literal

from app.chat.anthropic_api import AnthropicMessagesAPI
from app.chat.http_model_client import ChatCompletionsAPI
from app.chat.model import ModelAPI
from app.chat.responses_api import ResponsesAPI

ApiName = Literal["chat_completions", "responses", "anthropic_messages"]

# The most tools one request may offer, by API: OpenAI's chat completions refuse more than
# 128 functions (400); the same bound is kept for the others, so that a chat moved from one
# API to another never starts failing. A chat that would offer more is a 422 before any model
# call (`app/services/chat_search.py`); with tool search on it never does.
TOOL_LIMITS: dict[str, int] = {"chat_completions": 128, "responses": 128, "anthropic_messages": 128}
DEFAULT_TOOL_LIMIT = 128


def tool_limit(api: str | None) -> int:
    """The most tools one request to `api` may offer."""
    return TOOL_LIMITS.get(api or "chat_completions", DEFAULT_TOOL_LIMIT)


def build_model_api(name: ApiName, *, max_tokens: int, chain: bool = False) -> ModelAPI:
    """A fresh API (the Responses API keeps a bounded memory of reasoning items per client)."""
    if name == "responses":
        return ResponsesAPI(chain=chain)
    if name == "anthropic_messages":
        return AnthropicMessagesAPI(max_tokens=max_tokens)
    return ChatCompletionsAPI()
