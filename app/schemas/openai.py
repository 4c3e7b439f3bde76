"""`/v1/chat/completions` and `/v1/responses`: OpenAI's request shapes, as toolgate reads them.

Known OpenAI fields are accepted (an OpenAI SDK app sends them unchanged); unknown ones are
refused like on every route. What toolgate decides itself (the tools, the tool loop) is not
the client's: `tools` are refused, and `tool_choice` may only say `auto` or `none`. Sampling
fields (`temperature`, `top_p`, `max_tokens`, ...) are accepted and not applied: the answer
names them (`SAMPLING_FIELDS`, the `X-Toolgate-Ignored` header). toolgate's own options travel
in the `toolgate` extension object (the SDKs' `extra_body`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, StringConstraints

from app.schemas.chat import ApprovalDecision, ContextArguments, MessageToolCall
from app.schemas.fields import (
    MAX_JSON_DEPTH,
    BoundedJSON,
    ClientModel,
    Name,
    ServerName,
    Tag,
    WholeNumber,
)

ModelName = Annotated[str, StringConstraints(min_length=1, max_length=256)]
ResponseId = Annotated[str, StringConstraints(pattern=r"^resp_[0-9a-f]{32}$")]
# Accepted and not applied: toolgate's model calls use the provider's own defaults.
SAMPLING_FIELDS = (
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "reasoning_effort",
    "reasoning",
    "verbosity",
    "service_tier",
    "response_format",
    "text",
    "truncation",
)


class ToolgateOptions(ClientModel):
    """toolgate's own options on an OpenAI request (the SDKs: `extra_body={"toolgate": ...}`);
    each means what it means on `POST /chat`."""

    tool_ids: list[Name] | None = Field(default=None, max_length=128)
    tags: list[Tag] | None = Field(default=None, max_length=32)
    mcp_servers: list[ServerName] | None = Field(default=None, max_length=16)
    context_arguments: ContextArguments = Field(default_factory=dict)
    max_iterations: Annotated[int, Field(ge=1, le=1000), WholeNumber] | None = None
    category_hints: bool = True
    approvals: list[ApprovalDecision] = Field(default_factory=list, max_length=128)
    steps: bool = Field(
        default=False,
        description="Show the tool steps: a `toolgate` object in the answer (and in stream "
        "chunks or events as they happen). Off: the answer is plain OpenAI.",
    )


class OpenAIMessage(ClientModel):
    """A chat-completions message as an OpenAI SDK sends it (an assistant message it got back
    may carry `refusal`, `annotations`, `audio`: accepted, not sent on)."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, BoundedJSON]] | None = Field(
        default=None,
        description=f"Text, or content parts nesting at most {MAX_JSON_DEPTH} levels.",
    )
    name: Annotated[str, StringConstraints(max_length=64)] | None = None
    tool_calls: list[MessageToolCall] | None = Field(default=None, max_length=128)
    tool_call_id: Annotated[str, StringConstraints(max_length=256)] | None = None
    refusal: Annotated[str, StringConstraints(max_length=100_000)] | None = None
    annotations: list[dict[str, BoundedJSON]] | None = Field(default=None, max_length=1000)
    audio: dict[str, BoundedJSON] | None = None
    function_call: None = None


class StreamOptions(ClientModel):
    include_usage: bool = False
    include_obfuscation: bool = False


class OpenAIRequest(ClientModel):
    """What both APIs share."""

    model: ModelName | None = Field(
        default=None,
        description="`provider/model`, a provider's name, a bare model name (of the tenant's "
        "default provider, else the operator's) or `default`; `GET /v1/models` lists them.",
    )
    stream: bool = False
    tools: list[dict[str, BoundedJSON]] | None = Field(
        default=None,
        max_length=128,
        description="Refused unless empty: toolgate runs the tenant's tools, no client-side tools.",
        json_schema_extra={"maxItems": 0},
    )
    tool_choice: Literal["auto", "none"] | None = Field(
        default=None, description="`none`: no tools; which tool the model calls is its own choice."
    )
    parallel_tool_calls: bool | None = None
    metadata: (
        dict[
            Annotated[str, StringConstraints(max_length=64)],
            Annotated[str, StringConstraints(max_length=512)],
        ]
        | None
    ) = Field(
        default=None,
        max_length=16,
        description="Kept as OpenAI keeps it; `tool_ids` and `tags` (comma-separated) select "
        "tools like the `toolgate` extension's.",
    )
    user: Annotated[str, StringConstraints(max_length=256)] | None = None
    safety_identifier: Annotated[str, StringConstraints(max_length=256)] | None = None
    prompt_cache_key: Annotated[str, StringConstraints(max_length=256)] | None = None
    store: bool | None = None
    toolgate: ToolgateOptions = Field(default_factory=ToolgateOptions)
    # Accepted, not applied (SAMPLING_FIELDS).
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    max_tokens: Annotated[int, Field(ge=1), WholeNumber] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1), WholeNumber] | None = None
    max_output_tokens: Annotated[int, Field(ge=1), WholeNumber] | None = None
    stop: str | list[Annotated[str, StringConstraints(max_length=256)]] | None = None
    seed: Annotated[int, WholeNumber] | None = None
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    logit_bias: dict[str, float] | None = Field(default=None, max_length=300)
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20), WholeNumber] | None = None
    reasoning_effort: Annotated[str, StringConstraints(max_length=32)] | None = None
    reasoning: dict[str, BoundedJSON] | None = None
    verbosity: Annotated[str, StringConstraints(max_length=32)] | None = None
    service_tier: Annotated[str, StringConstraints(max_length=32)] | None = None
    response_format: dict[str, BoundedJSON] | None = None
    text: dict[str, BoundedJSON] | None = None
    truncation: Annotated[str, StringConstraints(max_length=32)] | None = None

    def ignored(self) -> list[str]:
        """The sampling fields the request set (accepted, not applied)."""
        return [name for name in SAMPLING_FIELDS if getattr(self, name) is not None]


class ChatCompletionRequest(OpenAIRequest):
    """`POST /v1/chat/completions`."""

    messages: list[OpenAIMessage] = Field(min_length=1, max_length=1000)
    stream_options: StreamOptions | None = None
    n: Annotated[int, Field(ge=1, le=1), WholeNumber] | None = Field(
        default=None, description="One choice only: toolgate runs one tool loop per request."
    )
    modalities: list[Literal["text"]] | None = None


class InputText(ClientModel):
    type: Literal["input_text", "output_text", "text"]
    text: Annotated[str, StringConstraints(max_length=1_000_000)]
    annotations: list[dict[str, BoundedJSON]] | None = Field(default=None, max_length=1000)
    logprobs: list[dict[str, BoundedJSON]] | None = Field(default=None, max_length=100_000)


class InputImage(ClientModel):
    type: Literal["input_image"]
    image_url: Annotated[str, StringConstraints(max_length=20_000_000)]
    detail: Literal["low", "high", "auto"] | None = None


class InputMessage(ClientModel):
    """A message item of `input` (an SDK sends an output message back as one: `id`, `status`
    accepted). toolgate runs the tools, so function calls and their outputs are no input."""

    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: (
        Annotated[str, StringConstraints(max_length=1_000_000)]
        | Annotated[
            list[Annotated[InputText | InputImage, Field(discriminator="type")]],
            Field(max_length=1000),
        ]
    )
    id: Annotated[str, StringConstraints(max_length=256)] | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class ResponsesRequest(OpenAIRequest):
    """`POST /v1/responses`: `input` (a text or a list of message items) and `instructions`."""

    input: (
        Annotated[str, StringConstraints(min_length=1, max_length=1_000_000)]
        | Annotated[list[InputMessage], Field(min_length=1, max_length=1000)]
    ) = Field(description="A text (the user's message) or message items (`role`, `content`).")
    instructions: Annotated[str, StringConstraints(max_length=1_000_000)] | None = None
    previous_response_id: (
        Annotated[str, StringConstraints(pattern=r"^resp_[0-9a-f]{32}$")] | None
    ) = Field(
        default=None,
        description="Continue a response toolgate kept: its run record must hold the messages "
        "(RUN_STORE_MESSAGES=true); a tenant key only (a client token's end user could name "
        "another's).",
    )
    include: list[Annotated[str, StringConstraints(max_length=128)]] | None = Field(
        default=None, max_length=16
    )
    background: Literal[False] | None = None


class OpenAIErrorDetail(BaseModel):
    message: str
    type: str = Field(description="`invalid_request_error`, `authentication_error`, ...")
    param: str | None = Field(description="The request field at fault, if one is.")
    code: str | None


class OpenAIError(BaseModel):
    """OpenAI's error shape: what every `/v1` error is answered with."""

    error: OpenAIErrorDetail


# Request examples (the OpenAPI document's; each works as sent on a fresh tenant).
CHAT_COMPLETION_EXAMPLES: dict[str, dict[str, Any]] = {
    "dice": {
        "summary": "The tenant's tools, run by toolgate until the model answers",
        "value": {
            "model": "default",
            "messages": [{"role": "user", "content": "Roll a six-sided die for me."}],
        },
    },
    "extension": {
        "summary": "Tools chosen and context values given in the `toolgate` extension",
        "value": {
            "model": "default",
            "messages": [{"role": "user", "content": "Roll a die."}],
            "toolgate": {"tool_ids": ["rolldice"], "context_arguments": {"user_id": "u-42"}},
        },
    },
    "streamed": {
        "summary": "As chat.completion.chunk events, ending in [DONE]",
        "value": {
            "model": "default",
            "messages": [{"role": "user", "content": "Roll a die."}],
            "stream": True,
        },
    },
}
RESPONSES_EXAMPLES: dict[str, dict[str, Any]] = {
    "dice": {
        "summary": "A text input and instructions",
        "value": {"model": "default", "instructions": "Be brief.", "input": "Roll a die."},
    },
    "messages": {
        "summary": "Message items as input",
        "value": {
            "model": "default",
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "Roll a die."}]}],
        },
    },
}
