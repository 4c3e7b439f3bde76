"""`ModelClient` over `wire.WirePool` and orjson, for each model API (`ModelAPI`): OpenAI chat
completions (here), the Responses API (`responses_api.py`), Anthropic Messages (`anthropic_api.py`).

Why not the `openai` SDK, measured: docs/performance.md, "Why the code is shaped as it is".
It keeps the SDK's semantics: the same retry rules (408, 409, 429, 5xx, connection errors and
timeouts; `x-should-retry`; `Retry-After`/`retry-after-ms` honoured up to 60 s, else
exponential backoff with jitter) and the same error mapping as `openai_sdk.py`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from email.utils import parsedate_to_datetime
from time import time
from typing import Any

import orjson

from app.chat.answer_worker import OFF_LOOP_BYTES, ReaderFailedError, answer_worker
from app.chat.model import (
    CHAT_COMPLETIONS_IDS,
    ModelAPI,
    ModelError,
    ModelToolCall,
    ModelTurn,
    PreparedTools,
    StreamAssembler,
    ToolChoice,
    TurnAssembler,
    Usage,
    answer_too_large,
    credentials_rejected,
    endpoint_host,
    finished,
    malformed_answer,
    model_timed_out,
    overloaded,
    rate_limited,
    read_answer,
    redirected,
    tool_options,
    unreachable,
    upstream_status,
    with_call_ids,
)
from app.http.netguard import OutboundBlockedError
from app.http.wire import (
    BodyTooLargeError,
    Connector,
    WireError,
    WirePool,
    checked_header,
    server_sent_events,
)
from app.kit.hidden import HiddenValues
from app.observe.telemetry import describe_model_call

logger = logging.getLogger(__name__)

OPENAI_BASE_URL = "https://api.openai.com/v1"
MAX_ANSWER_BYTES = 8 * 1024 * 1024  # MODEL_ANSWER_MAX_BYTES
MAX_RETRY_AFTER_S = 60.0
INITIAL_BACKOFF_S, MAX_BACKOFF_S = 0.5, 8.0
# The wait between attempts, looked up at each wait: the test suite puts a recorder here, so no
# test waits on the real clock for a backoff or a Retry-After (tests/support/fixtures/shared.py).
retry_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
_RETRY_STATUSES = frozenset({408, 409, 429})
_REJECTED = credentials_rejected().message  # `_told` names the client's own credentials
# No answer to read: the connection failed or broke HTTP, or the connect guard refused the
# endpoint (`app/http/netguard.py`: blocked, or its name did not resolve).
_UNREACHABLE = (WireError, OSError, OutboundBlockedError)


class _Retryable(Exception):
    def __init__(self, error: ModelError, delay_s: float | None) -> None:
        self.error, self.delay_s = error, delay_s


def read_completion(raw: bytes) -> ModelTurn:
    """A chat.completion body -> ModelTurn (`ChatCompletionsAPI.reader`); raises on anything
    malformed."""
    data = orjson.loads(raw)
    choice = data["choices"][0]
    message = choice["message"]
    calls = [
        ModelToolCall(
            id=str(call.get("id") or f"call_{index}"),
            name=str((call.get("function") or {}).get("name") or ""),
            arguments=_arguments_text((call.get("function") or {}).get("arguments")),
        )
        for index, call in enumerate(message.get("tool_calls") or [])
    ]
    content = message.get("content")
    usage = data.get("usage") or {}
    return ModelTurn(
        content=content if isinstance(content, str) else None,
        tool_calls=calls,
        usage=Usage(
            int(usage.get("prompt_tokens") or 0),
            int(usage.get("completion_tokens") or 0),
            int(usage.get("total_tokens") or 0),
        ),
        finish=finished(choice.get("finish_reason")),
    )


class ChatCompletionsAPI:
    """OpenAI chat completions: the loop's own message format, sent as it is."""

    name = "chat_completions"
    path = "/chat/completions"
    default_base_url = OPENAI_BASE_URL

    @staticmethod
    def reader(raw: bytes, /) -> ModelTurn:
        return read_completion(raw)

    def headers(self, api_key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"}

    def body(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        parallel_tool_calls: bool,
        stream: bool,
        tool_choice: ToolChoice = "auto",
    ) -> bytes:
        prepared = isinstance(tools, PreparedTools) and bool(tools)
        payload = _payload(
            model, messages, None if prepared else tools, parallel_tool_calls, tool_choice
        )
        if stream:
            payload["stream"] = True
            payload["stream_options"] = {"include_usage": True}
        body = orjson.dumps(payload)
        if not prepared:
            return body
        assert isinstance(tools, PreparedTools)
        # The tool options' bytes joined in (the same fields `tool_options` would add).
        options = b',"tools":' + tools.json + b',"tool_choice":"' + tool_choice.encode() + b'"'
        if not parallel_tool_calls and tool_choice == "auto":
            options += b',"parallel_tool_calls":false'
        return body[:-1] + options + b"}"

    def parse(self, raw: bytes, asked: Sequence[dict[str, Any]] = ()) -> ModelTurn:
        return read_answer(self, raw, asked)

    def finish(self, reading: ModelTurn, asked: Sequence[dict[str, Any]] = ()) -> ModelTurn:
        return reading

    def assembler(self, asked: Sequence[dict[str, Any]] = ()) -> StreamAssembler:
        return TurnAssembler()


class HTTPModelClient:
    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str,
        timeout_s: float,
        max_retries: int,
        api: ModelAPI | None = None,
        connect: Connector | None = None,
        ssl_context: ssl.SSLContext | None = None,
        credentials: str = "OPENAI_API_KEY",
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ) -> None:
        """`credentials` names where the key comes from, for the error that says it was refused;
        an error of the endpoint that quotes the key is never passed on. A key a header cannot
        carry (CR, LF, NUL: it would add a header or a request) is `HeaderError` here, before
        anything is sent; `request_head` checks every header again on every call."""
        self._api: ModelAPI = api or ChatCompletionsAPI()
        self._hidden, self._credentials = HiddenValues([api_key]), credentials
        url = (base_url or self._api.default_base_url).rstrip("/") + self._api.path
        self._pool = WirePool(url, connect=connect, ssl_context=ssl_context)
        self._host = endpoint_host(base_url or self._api.default_base_url)
        self._headers = {
            **self._api.headers(api_key),
            "Content-Type": "application/json",
            "Accept": "application/json",
            "Accept-Encoding": "identity",
            "User-Agent": "toolgate/0.1",
        }
        for name, value in self._headers.items():
            checked_header(name, value)
        self._timeout_s = timeout_s
        self._max_retries = max_retries
        self._max_answer = max_answer_bytes

    async def complete(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        parallel_tool_calls: bool,
        tool_choice: ToolChoice = "auto",
    ) -> ModelTurn:
        describe_model_call(api=self._api.name, host=self._pool.host, port=self._pool.port)
        body = self._api.body(
            model=model,
            messages=messages,
            tools=tools,
            parallel_tool_calls=parallel_tool_calls,
            stream=False,
            tool_choice=tool_choice,
        )
        try:
            for attempt in range(self._max_retries + 1):
                try:
                    return await self._attempt(body, messages)
                except _Retryable as retry:
                    await self._before_retry(attempt, retry)
        except ModelError as error:
            raise self._told(error) from None
        raise AssertionError("unreachable")

    async def _before_retry(self, attempt: int, retry: _Retryable) -> None:
        """The wait before the next attempt (backoff, or the endpoint's Retry-After); after the
        last attempt, its error."""
        if attempt == self._max_retries:
            raise retry.error from None
        await retry_sleep(_backoff(attempt, retry.delay_s))

    def _told(self, error: ModelError) -> ModelError:
        """The error as the caller may see it: credentials named, never quoted."""
        if error.message == _REJECTED:
            return credentials_rejected(self._credentials)
        shown = self._hidden.redact(error.message)  # raw, or escaped as an upstream echoes it
        if shown != error.message:
            return type(error)(shown, error.status_code, headers=error.headers)
        return error

    async def _attempt(self, body: bytes, messages: list[dict[str, Any]]) -> ModelTurn:
        try:
            async with asyncio.timeout(self._timeout_s):
                response = await self._pool.post(body, self._headers, cap=self._max_answer)
        except TimeoutError:
            raise _Retryable(model_timed_out(), None) from None
        except BodyTooLargeError:
            raise answer_too_large(self._max_answer) from None
        except _UNREACHABLE as exc:
            raise _Retryable(unreachable(self._host, exc), None) from None
        if response.status >= 300:
            raise _status_error(response.status, response.headers, response.body)
        return await self._turn(response.body, messages)

    async def _turn(self, raw: bytes, messages: list[dict[str, Any]]) -> ModelTurn:
        """The answer read: on the loop when small, else in the worker process (a large parse
        would hold every request of the process: `app/chat/answer_worker.py`)."""
        if len(raw) <= OFF_LOOP_BYTES:
            return self._api.parse(raw, messages)
        try:
            reading = await answer_worker().read(self._api.reader, raw)
        except (ReaderFailedError, TimeoutError) as exc:
            logger.warning("malformed model answer: %s", getattr(exc, "kind", "not read in time"))
            raise malformed_answer() from None
        return self._api.finish(reading, messages)

    async def stream(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        parallel_tool_calls: bool,
        tool_choice: ToolChoice = "auto",
    ) -> AsyncIterator[str | ModelTurn]:
        """Content deltas as they arrive, then the assembled turn. Failures before the first
        byte of content are retried like `complete`; later ones end the stream with the error."""
        describe_model_call(api=self._api.name, host=self._pool.host, port=self._pool.port)
        body = self._api.body(
            model=model,
            messages=messages,
            tools=tools,
            parallel_tool_calls=parallel_tool_calls,
            stream=True,
            tool_choice=tool_choice,
        )
        try:
            for attempt in range(self._max_retries + 1):
                try:
                    async for item in self._stream_attempt(body, messages):
                        yield item
                    return
                except _Retryable as retry:
                    await self._before_retry(attempt, retry)
        except ModelError as error:
            raise self._told(error) from None

    async def _stream_attempt(
        self, body: bytes, messages: list[dict[str, Any]]
    ) -> AsyncIterator[str | ModelTurn]:
        assembler = self._api.assembler(messages)
        whole: ModelTurn | None = None
        try:
            async with asyncio.timeout(self._timeout_s) as deadline:
                stream = self._pool.stream(body, self._headers, cap=self._max_answer)
                async with stream as response:
                    if response.status >= 300:
                        raw = await response.read()
                        raise _status_error(response.status, response.headers, raw)
                    if "event-stream" not in response.headers.get("content-type", ""):
                        # A server that ignores `stream: true` answers with one completion.
                        whole = await self._turn(await response.read(), messages)
                    async for data in server_sent_events(response):
                        if data.strip() == "[DONE]":
                            continue
                        added = assembler.feed(_chunk(data))
                        deadline.reschedule(asyncio.get_running_loop().time() + self._timeout_s)
                        if added:
                            yield added
        except TimeoutError:
            raise _Retryable(model_timed_out(), None) from None
        except BodyTooLargeError:
            raise answer_too_large(self._max_answer) from None
        except _UNREACHABLE as exc:
            raise _Retryable(unreachable(self._host, exc), None) from None
        if whole is not None:
            if whole.content:
                yield whole.content
            yield whole
            return
        yield assembler.turn()

    async def close(self) -> None:
        await self._pool.close()


def _payload(
    model: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    parallel_tool_calls: bool,
    tool_choice: ToolChoice,
) -> dict[str, Any]:
    return {
        "model": model,
        "messages": with_call_ids(messages, CHAT_COMPLETIONS_IDS),
        **tool_options(tools, parallel_tool_calls, tool_choice),
    }


def _chunk(data: str) -> dict[str, Any]:
    try:
        chunk = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise malformed_answer() from None
    if not isinstance(chunk, dict):
        raise malformed_answer()
    error = chunk.get("error")
    if isinstance(error, dict):  # some servers report errors inside the stream
        if error.get("type") == "overloaded_error":
            raise overloaded(None)
        raise upstream_status(500, str(error.get("message", "error")))
    return chunk


def _backoff(attempt: int, retry_after_s: float | None) -> float:
    if retry_after_s is not None and 0 < retry_after_s <= MAX_RETRY_AFTER_S:
        return retry_after_s
    delay: float = min(INITIAL_BACKOFF_S * 2.0**attempt, MAX_BACKOFF_S)
    return delay * (1 - 0.25 * random.random())


def _retry_after_s(headers: Any) -> float | None:
    for name, divisor in (("retry-after-ms", 1000), ("retry-after", 1)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return float(value) / divisor
        except ValueError:
            pass
        try:
            return float(parsedate_to_datetime(value).timestamp() - time())
        except (TypeError, ValueError):
            return None
    return None


def _status_error(status: int, headers: Any, raw: bytes) -> Exception:
    message = _error_message(raw)
    should_retry = headers.get("x-should-retry")
    retry = (should_retry == "true" or status in _RETRY_STATUSES or status >= 500) and (
        should_retry != "false"
    )
    error: ModelError
    if status < 400:
        return redirected(status, headers.get("location"))
    if status in (401, 403):
        error = credentials_rejected()
    elif status == 429:
        error = rate_limited(headers.get("retry-after"))
    elif status in (503, 529):  # overloaded (Anthropic says 529, OpenAI 503)
        error = overloaded(headers.get("retry-after"))
    else:
        error = upstream_status(status, message)
    return _Retryable(error, _retry_after_s(headers)) if retry else error


def _error_message(raw: bytes, limit: int = 300) -> str:
    try:
        data = orjson.loads(raw)
        message = (
            str(data["error"]["message"])
            if isinstance(data.get("error"), dict)
            else str(
                data.get("error") or data.get("message") or raw[:limit].decode(errors="replace")
            )
        )
    except (orjson.JSONDecodeError, AttributeError, TypeError, KeyError):
        message = raw[:limit].decode(errors="replace")
    return message if len(message) <= limit else message[:limit] + "..."


def _arguments_text(arguments: Any) -> str:
    # Some servers send arguments as an object rather than JSON text: keep the text form.
    if arguments is None:
        return ""
    return arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
