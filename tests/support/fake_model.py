"""A scripted OpenAI-compatible chat-completions server: each request takes the next step.

Steps build the answer from the request, so tests can assert on what the model was sent.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.types import Receive, Scope, Send


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


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

    def reset(self, *steps: Step, repeat: Step | None = None) -> None:
        self.script = deque(steps)
        self.repeat = repeat
        self.requests.clear()
        self.raw_requests.clear()

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
        step = self.script.popleft() if self.script else self.repeat
        reply = step(request) if step else Reply(500, b'{"error": {"message": "script ended"}}')
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        headers = [(k.lower().encode(), v.encode()) for k, v in reply.headers.items()]
        await send({"type": "http.response.start", "status": reply.status, "headers": headers})
        await send({"type": "http.response.body", "body": reply.body})
