"""Model providers a tenant registers: which API, where, with which of its secrets as the key."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, Field, StringConstraints

from app.schemas.fields import ClientModel, Name

ModelApi = Literal["chat_completions", "responses", "anthropic_messages"]
ModelName = Annotated[
    str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f]+$")
]
MAX_ALLOWED_MODELS = 64


class ModelProviderPut(ClientModel):
    api: ModelApi = Field(description="The model API the endpoint speaks.")
    base_url: Annotated[str, StringConstraints(min_length=1, max_length=2048)] = Field(
        description="Where the API is (`https://api.openai.com/v1`, "
        "`https://api.anthropic.com/v1`, an Azure or vLLM endpoint); it must pass the tenant's "
        "outbound policy."
    )
    api_key_secret: Name = Field(
        description="The name of one of the tenant's secrets (`PUT /secrets/{name}`) that holds "
        "the API key; the key itself is never sent here nor shown."
    )
    default_model: ModelName
    allowed_models: list[ModelName] | None = Field(
        default=None,
        max_length=MAX_ALLOWED_MODELS,
        description="The models a chat may name (`model`); default: only `default_model`.",
    )
    default: bool = Field(
        default=False, description="The tenant's default provider for chats that name none."
    )
    timeout_s: float = Field(default=60.0, gt=0, le=600, description="Per model call.")
    max_retries: int = Field(default=2, ge=0, le=2)
    max_tokens: int = Field(
        default=4096, ge=1, le=1_000_000, description="Output tokens per turn (Anthropic)."
    )
    previous_response_id: bool = Field(
        default=False,
        description="Responses API: send `previous_response_id` and only the items after it "
        "(the endpoint must store responses) instead of the whole conversation each turn.",
    )
    tool_search: Literal["function", "native"] = Field(
        default="function",
        description="Chats over large catalogs: `native` searches in the API's own form "
        "(Responses: a client-executed `tool_search` tool; Anthropic: `tool_reference` "
        "results and `defer_loading` tools); `function`: the `search_tools` function on any "
        "API (chat completions has no native form).",
    )
    strict_tools: bool = Field(
        default=False,
        description="OpenAI chat completions and responses: send each tool in strict mode "
        "(`strict: true`; every member required, optional ones nullable, objects closed) where "
        "its parameters convert (`GET /tools/{id}?format=openai-strict` says why one does "
        "not); the others are sent as they are. A `null` the model sends for an optional "
        "parameter is read as absent.",
    )


class ModelProvider(BaseModel):
    name: str
    api: ModelApi
    base_url: str
    api_key_secret: str
    default_model: str
    allowed_models: list[str]
    default: bool
    timeout_s: float
    max_retries: int
    max_tokens: int
    previous_response_id: bool = False
    tool_search: Literal["function", "native"] = "function"
    strict_tools: bool = False
    created_at: datetime
    updated_at: datetime
