"""`ModelClient` over the `openai` SDK: any OpenAI-compatible chat-completions endpoint."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any, cast

import openai
from openai import AsyncOpenAI

from app.chat.model import (
    CHAT_COMPLETIONS_IDS,
    ModelError,
    ModelToolCall,
    ModelTurn,
    ToolChoice,
    TurnAssembler,
    Usage,
    credentials_rejected,
    endpoint_host,
    finished,
    malformed_answer,
    model_timed_out,
    rate_limited,
    tool_options,
    unreachable,
    upstream_status,
    with_call_ids,
)
from app.observe.telemetry import describe_model_call, outbound_headers

logger = logging.getLogger(__name__)


class OpenAISDKClient:
    def __init__(
        self, *, base_url: str | None, api_key: str, timeout_s: float, max_retries: int
    ) -> None:
        # The SDK retries 429/5xx/connection errors itself, honouring Retry-After.
        self._client = AsyncOpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=max_retries
        )
        # Resolved at start-up: the SDK imports its resource modules on first use (30 ms here).
        self._completions = self._client.chat.completions

    async def complete(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        parallel_tool_calls: bool,
        tool_choice: ToolChoice = "auto",
    ) -> ModelTurn:
        options = tool_options(tools, parallel_tool_calls, tool_choice)
        sent = with_call_ids(messages, CHAT_COMPLETIONS_IDS)
        self._describe()
        try:
            completion = await self._completions.create(
                model=model,
                messages=cast(Any, sent),  # already OpenAI-format dicts
                extra_headers=outbound_headers({}) or None,  # the trace's traceparent, if on
                **options,
            )
        except openai.OpenAIError as exc:
            raise translate_error(exc) from exc
        except ValueError as exc:  # the SDK lets a non-JSON body's JSONDecodeError through
            raise malformed_answer() from exc
        return _turn(completion)

    async def stream(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        parallel_tool_calls: bool,
        tool_choice: ToolChoice = "auto",
    ) -> AsyncIterator[str | ModelTurn]:
        """Content deltas as they arrive, then the assembled turn."""
        options = {
            "stream": True,
            "stream_options": {"include_usage": True},
            **tool_options(tools, parallel_tool_calls, tool_choice),
        }
        sent = with_call_ids(messages, CHAT_COMPLETIONS_IDS)
        assembler = TurnAssembler()
        self._describe()
        try:
            chunks = await self._completions.create(
                model=model,
                messages=cast(Any, sent),
                extra_headers=outbound_headers({}) or None,
                **options,
            )
            async for chunk in chunks:
                added = assembler.feed(chunk.model_dump(exclude_none=True))
                if added:
                    yield added
        except openai.OpenAIError as exc:
            raise translate_error(exc) from exc
        except ValueError as exc:
            raise malformed_answer() from exc
        yield assembler.turn()

    def _describe(self) -> None:
        url = self._client.base_url
        describe_model_call(api="chat_completions", host=url.host, port=url.port)

    async def close(self) -> None:
        await self._client.close()


def translate_error(exc: openai.OpenAIError) -> ModelError:
    if isinstance(exc, openai.APITimeoutError):
        return model_timed_out()
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return credentials_rejected()
    if isinstance(exc, openai.RateLimitError):
        return rate_limited(exc.response.headers.get("retry-after"))
    if isinstance(exc, openai.APIStatusError):
        return upstream_status(exc.status_code, _short(exc.message))
    if isinstance(exc, openai.APIConnectionError):
        return unreachable(endpoint_host(str(exc.request.url)), exc)
    logger.warning("malformed model answer: %s", type(exc).__name__)
    return malformed_answer()


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _turn(completion: Any) -> ModelTurn:
    choices = getattr(completion, "choices", None)
    if not choices or getattr(choices[0], "message", None) is None:
        raise malformed_answer()
    message = choices[0].message
    calls = [
        ModelToolCall(
            id=call.id or f"call_{index}",
            name=(call.function.name or "") if call.function else "",
            arguments=(call.function.arguments or "") if call.function else "",
        )
        for index, call in enumerate(message.tool_calls or [])
    ]
    usage = completion.usage
    return ModelTurn(
        content=message.content,
        tool_calls=calls,
        usage=Usage(usage.prompt_tokens or 0, usage.completion_tokens or 0, usage.total_tokens or 0)
        if usage
        else Usage(),
        finish=finished(choices[0].finish_reason),
    )
