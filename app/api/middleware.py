"""ASGI middleware that must see the raw request."""

from __future__ import annotations

import uuid

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.problems import problem_response


class BodySizeLimitMiddleware:
    """413 when a body exceeds `max_bytes`: at once if declared, else as soon as it streams past."""

    def __init__(self, app: ASGIApp, *, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _detail(self) -> str:
        return f"The request body is larger than the limit of {self.max_bytes} bytes."

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            await problem_response(413, self._detail())(scope, receive, send)
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # FastAPI re-raises HTTPException from body parsing; the problem handler
                    # answers it like any other error.
                    raise HTTPException(413, self._detail())
            return message

        await self.app(scope, limited_receive, send)


REQUEST_ID_HEADER = b"x-request-id"
_MAX_REQUEST_ID = 128
_ID_CHARS = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:")


class RequestIdMiddleware:
    """Every response carries `X-Request-ID`: the caller's, when it is a sane token, else a new
    one. It is kept in `scope["state"]["request_id"]` for whatever logs the request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(REQUEST_ID_HEADER, b"")
        if not (0 < len(given) <= _MAX_REQUEST_ID and _ID_CHARS.issuperset(given)):
            given = uuid.uuid4().hex.encode()
        scope.setdefault("state", {})["request_id"] = given.decode()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [h for h in message.get("headers", []) if h[0] != REQUEST_ID_HEADER]
                message["headers"] = [*headers, (REQUEST_ID_HEADER, given)]
            await send(message)

        await self.app(scope, receive, send_with_id)
