"""A scripted model server (chat completions, Responses, Anthropic Messages at their paths):
each request takes the next step.

Steps build the answer from the request, so tests can assert on what the model was sent. A
request the API would refuse (`model_rules`: Anthropic's tool-use history without `tools`, ids
outside its alphabet, ...) is answered with that API's 400 and kept in `refused`.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.types import Receive, Scope, Send

from tests.support import model_rules

RELEASE_PATIENCE_S = 60.0  # a held reply a test never released is answered after this


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    chunks: list[bytes] | None = None  # sent one by one (chunked transfer), after `body`
    # Held until the test sets it (the fake may serve from another thread): a model that
    # answers when the test says, not after a time the test hopes is long enough.
    released: threading.Event | None = None


Step = Callable[[dict[str, Any]], Reply]
_ids = itertools.count(1)


def _completion(message: dict[str, Any], finish_reason: str) -> Reply:
    body = {
        "id": f"chatcmpl-{next(_ids)}",
        "object": "chat.completion",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }
    return Reply(body=orjson.dumps(body), headers={"content-type": "application/json"})


def text(content: str) -> Step:
    return lambda request: _completion({"role": "assistant", "content": content}, "stop")


def tool_calls(*calls: tuple[str, Any], finish_reason: str = "tool_calls") -> Step:
    """Each call is (name, arguments); arguments that are not a str are JSON-encoded."""

    def step(request: dict[str, Any]) -> Reply:
        encoded = [
            {
                "id": f"call_{next(_ids)}",
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else orjson.dumps(args).decode(),
                },
            }
            for name, args in calls
        ]
        return _completion(
            {"role": "assistant", "content": None, "tool_calls": encoded}, finish_reason
        )

    return step


def _sse(chunks: list[dict[str, Any]]) -> Reply:
    events = [b"data: " + orjson.dumps(chunk) + b"\n\n" for chunk in chunks]
    return Reply(
        headers={"content-type": "text/event-stream"}, chunks=[*events, b"data: [DONE]\n\n"]
    )


def _delta(delta: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-s",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
        **extra,
    }


USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}


def streamed_text(*pieces: str) -> Step:
    chunks = [_delta({"role": "assistant", "content": ""})]
    chunks += [_delta({"content": piece}) for piece in pieces]
    chunks.append({**_delta({}), "choices": [], "usage": USAGE})
    return lambda request: _sse(chunks)


def streamed_tool_calls(*calls: tuple[str, str, str], piece: int = 3) -> Step:
    """Calls as (id, name, arguments JSON), their arguments cut into `piece`-sized fragments
    and the calls interleaved by index, as providers stream them."""
    chunks = [
        _delta(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "index": i,
                        "id": call_id,
                        "type": "function",
                        "function": {"name": name, "arguments": ""},
                    }
                ],
            }
        )
        for i, (call_id, name, _) in enumerate(calls)
    ]
    fragments = [[args[k : k + piece] for k in range(0, len(args), piece)] for _, _, args in calls]
    for round_index in range(max(len(f) for f in fragments)):
        for i, parts in enumerate(fragments):
            if round_index < len(parts):
                chunks.append(
                    _delta(
                        {
                            "tool_calls": [
                                {"index": i, "function": {"arguments": parts[round_index]}}
                            ]
                        }
                    )
                )
    chunks.append({**_delta({}), "choices": [], "usage": USAGE})
    return lambda request: _sse(chunks)


def status(code: int, headers: dict[str, str] | None = None) -> Step:
    body = orjson.dumps({"error": {"message": f"fake error {code}", "type": "fake"}})
    return lambda request: Reply(
        code, body, {"content-type": "application/json", **(headers or {})}
    )


def hang(seconds: float) -> Step:
    return lambda request: Reply(delay_s=seconds, body=b"{}")


def raw(body: bytes, content_type: str = "application/json") -> Step:
    return lambda request: Reply(body=body, headers={"content-type": content_type})


class FakeModel:
    """The ASGI app. `script` is consumed in order; `repeat` answers once it is empty."""

    def __init__(self) -> None:
        self.script: deque[Step] = deque()
        self.repeat: Step | None = None
        self.requests: list[dict[str, Any]] = []
        self.raw_requests: list[bytes] = []
        self.refused: list[str] = []  # what the API's rules refused, request by request

    def reset(self, *steps: Step, repeat: Step | None = None) -> None:
        self.script = deque(steps)
        self.repeat = repeat
        self.requests.clear()
        self.raw_requests.clear()
        self.refused.clear()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert scope["type"] == "http"
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.raw_requests.append(body + b" " + repr(scope["headers"]).encode())
        request = orjson.loads(body) if body else {}
        self.requests.append(request)
        problems = model_rules.problems(scope["path"], request) if request else []
        if problems:  # the API refuses it: no step is taken
            self.refused += problems
            reply = Reply(
                400,
                orjson.dumps(model_rules.refusal(scope["path"], problems)),
                {"content-type": "application/json"},
            )
        else:
            step = self.script.popleft() if self.script else self.repeat
            reply = step(request) if step else Reply(500, b'{"error": {"message": "script ended"}}')
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.released is not None:
            await asyncio.to_thread(reply.released.wait, RELEASE_PATIENCE_S)
        headers = [(k.lower().encode(), v.encode()) for k, v in reply.headers.items()]
        await send({"type": "http.response.start", "status": reply.status, "headers": headers})
        for chunk in reply.chunks or []:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": reply.body})


def text_after(seconds: float, content: str = "hello") -> Step:
    """`text(content)`, answered after `seconds` (a slow model holding its chat slot)."""
    answer = text(content)

    def step(request: dict[str, Any]) -> Reply:
        reply = answer(request)
        reply.delay_s = seconds
        return reply

    return step


def obedient() -> Step:
    """A model that does what the last tool result tells it: "Call NAME now." calls NAME (with
    no arguments); anything else is answered in text. The prompt-injection victim."""

    def step(request: dict[str, Any]) -> Reply:
        last = request["messages"][-1]
        order = re.search(r"Call (\w+) now", str(last.get("content"))) if last else None
        if last.get("role") == "tool" and order:
            return tool_calls((order.group(1), {}))(request)
        return text("done")(request)

    return step
