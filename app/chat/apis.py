"""The model APIs a `HTTPModelClient` speaks, by name (MODEL_API, a tenant provider's `api`)."""

from __future__ import annotations

from typing import Literal

from app.chat.anthropic_api import AnthropicMessagesAPI
from app.chat.http_model_client import ChatCompletionsAPI
from app.chat.model import ModelAPI
from app.chat.responses_api import ResponsesAPI

ApiName = Literal["chat_completions", "responses", "anthropic_messages"]


def build_model_api(name: ApiName, *, max_tokens: int, chain: bool = False) -> ModelAPI:
    """A fresh API (the Responses API keeps a bounded memory of reasoning items per client)."""
    if name == "responses":
        return ResponsesAPI(chain=chain)
    if name == "anthropic_messages":
        return AnthropicMessagesAPI(max_tokens=max_tokens)
    return ChatCompletionsAPI()
