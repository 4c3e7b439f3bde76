"""The one seam between the chat loop and a model: what it sends, gets back, and can fail with.

Swap the transport by writing another `ModelClient`; the loop does not change.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

import orjson

from app.errors import AppError
from app.tools.typed import TypedTool

logger = logging.getLogger(__name__)

# Whether the model may call the tools it is offered this turn: the loop's last turn keeps the
# tools (Anthropic refuses a tool-use history without them) and forbids calling one.
ToolChoice = Literal["auto", "none"]


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


def tool_options(
    tools: list[dict[str, Any]] | None, parallel_tool_calls: bool, tool_choice: ToolChoice = "auto"
) -> dict[str, Any]:
    """The chat-completions fields that offer tools (none when there are no tools)."""
    if not tools:
        return {}
    options: dict[str, Any] = {"tools": tools, "tool_choice": tool_choice}
    if not parallel_tool_calls and tool_choice == "auto":  # sent only when off: not every
        options["parallel_tool_calls"] = False  # server knows the field
    return options


class CallIds:
    """Tool-call ids as one API accepts them: an id of the conversation (another model's,
    a gateway's: `functions.add:0`) outside the API's alphabet or over its length becomes a
    stand-in made of its allowed characters and a digest of the whole id. The same id always
    gives the same stand-in, so a call and its result still match in the request, and the
    caller's messages keep their own ids: nothing needs mapping back."""

    def __init__(self, alphabet: str, max_length: int) -> None:
        self._fits = re.compile(f"[{alphabet}]{{1,{max_length}}}")
        self._outside = re.compile(f"[^{alphabet}]")
        self._max_length = max_length

    def __call__(self, call_id: str) -> str:
        if self._fits.fullmatch(call_id):
            return call_id
        digest = hashlib.blake2b(call_id.encode(), digest_size=8).hexdigest()
        kept = self._outside.sub("_", call_id)[: self._max_length - len(digest) - 1]
        return f"{kept}_{digest}"


# Chat completions: OpenAI refuses a tool call id over 40 characters (`string_above_max_length`).
CHAT_COMPLETIONS_IDS = CallIds(r"\x00-\U0010ffff", 40)


def with_call_ids(messages: list[dict[str, Any]], ids: CallIds) -> list[dict[str, Any]]:
    """`messages` with each tool call's id and each tool message's `tool_call_id` as `ids`
    gives them; the same list when none changes (nearly always)."""
    if all(_ids_fit(message, ids) for message in messages):
        return messages
    return [_with_ids(message, ids) for message in messages]


def _ids_fit(message: dict[str, Any], ids: CallIds) -> bool:
    if message.get("role") == "tool":
        return ids(str(message.get("tool_call_id", ""))) == message.get("tool_call_id")
    return all(ids(str(c.get("id", ""))) == c.get("id") for c in message.get("tool_calls") or ())


def _with_ids(message: dict[str, Any], ids: CallIds) -> dict[str, Any]:
    if message.get("role") == "tool":
        return {**message, "tool_call_id": ids(str(message.get("tool_call_id", "")))}
    calls = message.get("tool_calls")
    if not calls:
        return message
    return {**message, "tool_calls": [{**c, "id": ids(str(c.get("id", "")))} for c in calls]}


# The loop writes a failed tool's result with this prefix; APIs with an error flag on tool
# results (Anthropic's `is_error`) read it back from there.
TOOL_ERROR_PREFIX = "Error: "


@dataclass
class NativeSearch:
    """A chat's tool search in its model API's own form (OpenAI Responses: a client-executed
    `tool_search` tool, its calls `tool_search_call` items and the tools a search found a
    `tool_search_output` item; Anthropic Messages: the found tools sent with `defer_loading`
    and the search's result `tool_reference` blocks). The loop keeps which tools each search
    call revealed; the API renders them (`ResponsesAPI`, `AnthropicMessagesAPI`)."""

    name: str  # the search function's name
    description: str
    parameters: dict[str, Any]
    revealed: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # by call id

    @property
    def revealed_names(self) -> set[str]:
        return {s["function"]["name"] for schemas in self.revealed.values() for s in schemas}


class PreparedTools(list[dict[str, Any]]):
    """The chat-completions `tools` of a request, with their JSON already made: each offered
    tool's bytes were built once with the tool (`TypedTool.schema_json`), and a request joins
    them (`ChatCompletionsAPI.body`) instead of serializing every schema on every call
    (docs/performance.md, "Catalog size"). Still a plain list for every other reader."""

    json: bytes
    native: NativeSearch | None = None  # set when the chat searches in its API's own form

    @classmethod
    def of(
        cls,
        tools: Sequence[TypedTool],
        extra: Sequence[dict[str, Any]] = (),
        native: NativeSearch | None = None,
    ) -> PreparedTools:
        prepared = cls([*(tool.schema for tool in tools), *extra])
        parts = [tool.schema_json for tool in tools] + [orjson.dumps(item) for item in extra]
        prepared.json = b"[" + b",".join(parts) + b"]"
        prepared.native = native
        return prepared


def native_search(tools: Sequence[dict[str, Any]] | None) -> NativeSearch | None:
    """The chat's search in its API's own form, if it has one."""
    return tools.native if isinstance(tools, PreparedTools) else None


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
        tool_choice: ToolChoice = "auto",
    ) -> bytes: ...

    def parse(self, raw: bytes, asked: Sequence[dict[str, Any]] = ()) -> ModelTurn:
        """A whole answer to the request that sent the messages `asked`; anything malformed
        raises `malformed_answer()` (`read_answer`: `finish(reader(raw))`)."""
        ...

    @property
    def reader(self) -> Callable[[bytes], Any]:
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
        tool_choice: ToolChoice = "auto",
    ) -> ModelTurn:
        """One turn; `tool_choice="none"`: the tools are offered but none may be called."""
        ...

    def stream(
        self,
        *,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        parallel_tool_calls: bool,
        tool_choice: ToolChoice = "auto",
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
