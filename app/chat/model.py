"""The one seam between the chat loop and a model: what it sends, gets back, and can fail with.

Swap the transport by writing another `ModelClient`; the loop does not change.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

from app.errors import AppError

logger = logging.getLogger(__name__)


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
    # Why the model stopped, the same words on every API (`finished`); None: not said.
    finish: str | None = None


# Each API's stop reasons in one vocabulary: stop, tool_calls, length, refusal, content_filter.
_FINISHES = {
    "stop": "stop",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "tool_use": "tool_calls",
    "length": "length",
    "max_tokens": "length",
    "max_output_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "refusal",
    "content_filter": "content_filter",
}


def finished(reason: object) -> str | None:
    """An API's stop reason in the shared vocabulary; an unknown one is kept as it is."""
    if not isinstance(reason, str) or not reason:
        return None
    return _FINISHES.get(reason, reason[:64])


def tool_options(tools: list[dict[str, Any]] | None, parallel_tool_calls: bool) -> dict[str, Any]:
    """The chat-completions fields that offer tools (none when there are no tools)."""
    if not tools:
        return {}
    options: dict[str, Any] = {"tools": tools, "tool_choice": "auto"}
    if not parallel_tool_calls:  # sent only when off: not every server knows the field
        options["parallel_tool_calls"] = False
    return options


# The loop writes a failed tool's result with this prefix; APIs with an error flag on tool
# results (Anthropic's `is_error`) read it back from there.
TOOL_ERROR_PREFIX = "Error: "


class ConvertedTools:
    """Tool lists in an API's own format, converted once per list: the loop sends the same list
    object every turn of a chat. The most recent `size` lists are kept (and, being referenced,
    their ids cannot be reused by other lists while kept)."""

    def __init__(
        self, convert: Callable[[list[dict[str, Any]]], list[dict[str, Any]]], size: int = 256
    ) -> None:
        self._convert = convert
        self._size = size
        self._kept: OrderedDict[int, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = (
            OrderedDict()
        )

    def __call__(self, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        kept = self._kept.get(id(tools))
        if kept is not None and kept[0] is tools:
            self._kept.move_to_end(id(tools))
            return kept[1]
        converted = self._convert(tools)
        self._kept[id(tools)] = (tools, converted)
        while len(self._kept) > self._size:
            self._kept.popitem(last=False)
        return converted


class StreamAssembler(Protocol):
    def feed(self, event: dict[str, Any]) -> str:
        """Take one streamed event (a JSON object); return the content it adds ("" if none)."""
        ...

    def turn(self) -> ModelTurn: ...


class ModelAPI(Protocol):
    """One model API's wire format: what `HTTPModelClient` sends and how it reads answers.

    The loop speaks chat-completions messages and tool schemas; each API converts them."""

    name: str
    path: str  # appended to the base URL
    default_base_url: str

    def headers(self, api_key: str) -> dict[str, str]: ...

    def body(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        parallel_tool_calls: bool,
        stream: bool,
    ) -> bytes: ...

    def parse(self, raw: bytes, asked: Sequence[dict[str, Any]] = ()) -> ModelTurn:
        """A whole answer to the request that sent the messages `asked`; anything malformed
        raises `malformed_answer()` (`read_answer`: `finish(reader(raw))`)."""
        ...

    @staticmethod
    def reader(raw: bytes, /) -> Any:
        """A whole answer's bytes -> what `finish` takes: a module-level function with no
        state, so that a worker process can run it on an answer too large to parse on the
        event loop (`app/chat/answer_worker.py`); it raises on anything malformed."""
        ...

    def finish(self, reading: Any, asked: Sequence[dict[str, Any]] = ()) -> ModelTurn:
        """The turn of what `reader` read (with any state the API keeps across turns)."""
        ...

    def assembler(self, asked: Sequence[dict[str, Any]] = ()) -> StreamAssembler: ...


class ModelClient(Protocol):
    async def complete(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        parallel_tool_calls: bool,
    ) -> ModelTurn: ...

    def stream(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        parallel_tool_calls: bool,
    ) -> AsyncIterator[str | ModelTurn]:
        """Content deltas (str) as the model streams them, then the whole turn."""
        ...

    async def close(self) -> None: ...


class ModelError(AppError):
    """The model call failed; each subclass has the status the chat answers with."""


class ModelNotConfiguredError(ModelError):
    status_code = 503


class MissingModel:
    """The operator's model client when none is configured: every call is a 503."""

    async def complete(self, **request: Any) -> ModelTurn:
        raise ModelNotConfiguredError("No model is configured.")

    async def stream(self, **request: Any) -> AsyncIterator[str | ModelTurn]:
        raise ModelNotConfiguredError("No model is configured.")
        yield ""  # pragma: no cover - makes this an async generator

    async def close(self) -> None:
        return None


class ModelRateLimitedError(ModelError):
    status_code = 503


class ModelUpstreamError(ModelError):
    status_code = 502


class ModelTimeoutError(ModelError):
    status_code = 504


# One wording for every model client, so a failure reads the same whichever transport is used.
def credentials_rejected(source: str = "OPENAI_API_KEY") -> ModelUpstreamError:
    return ModelUpstreamError(
        f"The model endpoint rejected the service's credentials (check {source})."
    )


def rate_limited(retry_after: str | None) -> ModelRateLimitedError:
    headers = {"Retry-After": retry_after} if retry_after and retry_after.isdigit() else None
    return ModelRateLimitedError(
        "The model endpoint is rate limiting requests; retry later.", headers=headers
    )


def overloaded(retry_after: str | None) -> ModelRateLimitedError:
    headers = {"Retry-After": retry_after} if retry_after and retry_after.isdigit() else None
    return ModelRateLimitedError("The model endpoint is overloaded; retry later.", headers=headers)


def upstream_status(status: int, message: str) -> ModelUpstreamError:
    return ModelUpstreamError(f"The model endpoint answered HTTP {status}: {message}")


def endpoint_host(url: str) -> str:
    """The host (and port) of a model endpoint's URL: all an answer or a log line names of it
    (its path or query may carry a key)."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return "an unreadable URL"
    if not host:
        return "an unreadable URL"
    return f"{host}:{port}" if port else host


def unreachable(host: str, cause: BaseException) -> ModelUpstreamError:
    """The endpoint did not take the connection: the caller reads which host, the log why."""
    logger.warning(
        "cannot reach the model endpoint at %s (%s: %s)", host, type(cause).__name__, cause
    )
    return ModelUpstreamError(f"Cannot reach the model endpoint at {host}.")


def malformed_answer() -> ModelUpstreamError:
    return ModelUpstreamError("The model endpoint sent a malformed answer.")


# What a reader raises on an answer it cannot read.
MALFORMED = (ValueError, KeyError, IndexError, TypeError, AttributeError)  # JSONDecodeError too


def read_answer(api: ModelAPI, raw: bytes, asked: Sequence[dict[str, Any]] = ()) -> ModelTurn:
    """`api.parse`: the answer read on the loop, anything malformed `malformed_answer()`."""
    try:
        reading = api.reader(raw)
    except MALFORMED as exc:
        logger.warning("malformed model answer: %s", type(exc).__name__)
        raise malformed_answer() from None
    return api.finish(reading, asked)


def answer_too_large(limit: int) -> ModelUpstreamError:
    return ModelUpstreamError(
        f"The model endpoint's answer is larger than {limit} bytes (MODEL_ANSWER_MAX_BYTES); "
        "it was not read."
    )


def redirected(status: int, location: str | None) -> ModelUpstreamError:
    """A 3xx: redirects are not followed (each hop would need the connect guard again, and the
    key would go to wherever it points); the caller reads where it points, never its query."""
    target = endpoint_location(location) if location else "no Location"
    return ModelUpstreamError(
        f"The model endpoint redirected (HTTP {status}) to {target}; redirects are not followed: "
        "use the address it points to as the base URL."
    )


def endpoint_location(url: str) -> str:
    """A URL as an error may show it: scheme, host and path (a query may carry a key)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "an unreadable URL"
    if not parts.scheme or not parts.netloc:
        return parts.path[:200] or "an unreadable URL"
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path[:200]}"


def model_timed_out() -> ModelTimeoutError:
    return ModelTimeoutError("The model did not answer in time.")


class TurnAssembler:
    """Builds a ModelTurn from `chat.completion.chunk` payloads (the OpenAI streaming format).

    Tool calls arrive in fragments: an id and name first, then the arguments in pieces, several
    calls interleaved by `index`.
    """

    def __init__(self) -> None:
        self._content: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._usage = Usage()
        self._finish: str | None = None

    def feed(self, event: dict[str, Any]) -> str:
        """Take one chunk; return the content it adds ("" if none)."""
        chunk = event
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = Usage(
                int(usage.get("prompt_tokens") or 0),
                int(usage.get("completion_tokens") or 0),
                int(usage.get("total_tokens") or 0),
            )
        added = ""
        for choice in chunk.get("choices") or []:
            self._finish = finished(choice.get("finish_reason")) or self._finish
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if isinstance(text, str) and text:
                self._content.append(text)
                added += text
            for call in delta.get("tool_calls") or []:
                self._feed_call(call)
        return added

    def _feed_call(self, call: dict[str, Any]) -> None:
        index = call.get("index")
        slot = self._calls.setdefault(
            index if isinstance(index, int) else len(self._calls),
            {"id": "", "name": "", "arguments": []},
        )
        if call.get("id"):
            slot["id"] = str(call["id"])
        function = call.get("function") or {}
        name = function.get("name")
        if isinstance(name, str) and name and not slot["name"].endswith(name):
            slot["name"] += name
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            slot["arguments"].append(arguments)

    def turn(self) -> ModelTurn:
        calls = [
            ModelToolCall(
                id=slot["id"] or f"call_{index}",
                name=slot["name"],
                arguments="".join(slot["arguments"]),
            )
            for index, slot in sorted(self._calls.items())
        ]
        return ModelTurn("".join(self._content) or None, calls, self._usage, self._finish)
